// The schema of FleetStore's record (docs/schema.md: it is a user interface), as the migrations
// that build it: migration N takes the database from version N-1 to N (SQLite's PRAGMA
// user_version, PostgreSQL's schema_version table). One list for both engines, with the same
// version numbers; a step's DDL differs by dialect only where it must (types, identity columns,
// the date arithmetic of a view). A released migration never changes; a change is a new one.
#pragma once

#include <vector>

#include "common/sql/connection.h"

namespace fleet::daemon {

// The column of `containers` holding the container's Proxmox id: `ctid` on SQLite, `vmid` on
// PostgreSQL (where ctid is a system column of every table).
const char* ContainerIdColumn(sql::Dialect dialect);

// Every migration for `dialect`, oldest first.
std::vector<sql::Migration> FleetStoreMigrations(sql::Dialect dialect);

}  // namespace fleet::daemon
