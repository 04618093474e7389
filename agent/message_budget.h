// What one agent message may carry: a Status snapshot of eight failed servers, each with the
// classifier's longest evidence (hundreds of lines of 8 KiB), would exceed any gRPC message limit
// and cut the container off for good. So every diagnosis that leaves the agent is fitted to a
// byte budget: evidence lines farthest from the root cause go first (an elision entry, line 0,
// says how many), then over-long line texts are cut, then facts, symptoms and packages beyond a
// few. A snapshot's diagnoses share one budget; each event's diagnosis has its own. The events
// carry the fuller evidence (each bounded); a snapshot is for state.
//
// Plain functions, thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/diagnosis.pb.h"

namespace fleet::agent {

// All the diagnoses of one Status snapshot together.
inline constexpr size_t kSnapshotDiagnosisBytes = 2 << 20;
// One diagnosis in a snapshot, however many servers share the budget.
inline constexpr size_t kMinSnapshotDiagnosisBytes = 16 << 10;
// The diagnosis of one event (or of one server's status in a Launch or Stop reply).
inline constexpr size_t kEventDiagnosisBytes = 2 << 20;
// One message of the EventBatches stream: at most this many events, and no more bytes than this
// unless its one event is larger (each event is bounded by kEventDiagnosisBytes and a little).
inline constexpr size_t kEventBatchMax = 256;
inline constexpr size_t kEventBatchBytes = 3 << 20;
// Processes listed in one stall report.
inline constexpr int kMaxReportedProcesses = 64;

// Shrinks `d` to at most about `max_bytes` serialized (a few hundred bytes over when even its
// summary and root-cause line are that long). Returns how many evidence lines it left out (0
// when it fitted already).
int64_t FitDiagnosis(fleet::v1::Diagnosis* d, size_t max_bytes);

}  // namespace fleet::agent
