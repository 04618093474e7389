// The schema of fleet.db, FleetStore's record (docs/schema.md: it is a user interface), as the
// migrations that build it: migration N takes the database from PRAGMA user_version N-1 to N
// (sqlite::Database::Migrate). A released migration never changes; a change is a new one.
#pragma once

#include <vector>

#include "common/sqlite/database.h"

namespace fleet::daemon {

// Every migration, oldest first.
std::vector<sqlite::Migration> FleetStoreMigrations();

}  // namespace fleet::daemon
