// Reads a YAML document into a protobuf message by walking the message's descriptor alongside the
// YAML nodes, so that every error keeps the line yaml-cpp saw it on (a detour through JSON would
// lose it). Generic over messages; the fleet config is its one user.
//
// Mapping: YAML keys are the proto field names (snake_case). A message is a YAML map; a repeated
// field a list; a map field a YAML map; enums are their value names in lower case (`ssh_tunnel`,
// `ssh-tunnel` too), the zero value (`*_UNSPECIFIED`) excluded; booleans `true`/`false`;
// integers decimal and range-checked; google.protobuf.Duration a string as ParseConfigDuration
// reads it. A null value (`key:` with nothing, `~`) is the same as leaving the key out.
// Errors: unknown keys (naming the known fields, with a close match as a suggestion), duplicate
// keys, wrong kinds, bad scalars, malformed YAML, more than one document, and a document past
// the limits below (its size, its depth, its nodes with aliases expanded).
//
// yaml-cpp throws; this is where its exceptions end. Thread-compatible (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/config/config_error.h"
#include "google/protobuf/message.h"

namespace fleet::config {

// What a document may hold, checked before it is turned into nodes: a config is hand-written
// and small (a fleet of 1,000 containers is about 500 KB and 50,000 nodes), while a hostile one
// could make yaml-cpp or the walk below exhaust the stack (deep nesting) or the CPU and memory
// (aliases of aliases: "a billion laughs").
inline constexpr size_t kMaxYamlBytes = 4 << 20;     // bytes, refused before parsing
inline constexpr int kMaxYamlDepth = 64;             // nested sequences and maps
inline constexpr int64_t kMaxYamlNodes = 1'000'000;  // nodes, every alias counted expanded

// Fills `message` (cleared first) from `yaml` and records in `source_map` (may be null) the line
// of every field path given a non-null value, and the document's own line under "". Returns the
// errors found, each with its line; empty when the document fits the message.
std::vector<ConfigError> ReadYamlMessage(std::string_view yaml, google::protobuf::Message* message,
                                         SourceMap* source_map);

}  // namespace fleet::config
