// Message size limits of the daemon <-> agent channel, set deliberately on both sides (the agent's
// server and the daemon's client channel) instead of gRPC's defaults (4 MiB received, unlimited
// sent). What the agent sends is bounded well below even the 4 MiB default by construction
// (agent/message_budget.h), so an older daemon that sets no limit still reads it; the margin up
// to this limit is for requests and replies that grow with the config (a Launch's spec, a probe).
#pragma once

namespace fleet {

inline constexpr int kAgentRpcMaxMessageBytes = 16 << 20;

}  // namespace fleet
