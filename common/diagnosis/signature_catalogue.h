// The signature catalogue: data, not code. The built-in catalogue (signatures.conf, compiled in)
// can be replaced by a file in the same format (`fleetctl explain --signatures FILE`).
//
// Format: sections, one per signature, of `key = value` lines; `#` starts a comment line.
//
//   [ptxas_unsupported_version]
//   role    = root_cause            # root_cause | symptom | phase | progress | context
//   class   = ptx_version_unsupported
//   fix     = toolchain             # optional; the class's default otherwise
//   within  = ninja_failed          # optional: ninja_failed | traceback | worker_error
//   pattern = Unsupported \.version (?P<ptx_wanted>\d+\.\d+); ...
//   summary = ptxas accepts PTX ISA up to {ptx_supported} but was given {ptx_wanted}
//   phase   = jit_compiling         # phase signatures: loading | jit_compiling |
//   ends    = jit_compiling         #   capturing_graphs | ready
//                                   # progress signatures: the phase the steps count
//                                   #   (jit_compiling when not given)
//   failure_class = jit_build_failed
//   all_matches = true
//   confidence = low                # optional, root causes and symptoms: a stem of a message,
//                                   #   not the message (default high)
//   consequence = true              # optional, root causes: what follows another process's
//                                   #   failure (a peer gone); a later root cause that is not a
//                                   #   consequence replaces it (default false)
//
// Inferred root causes (always confidence low):
//
//   infer    = cut                  # a message cut off where its line ends
//   after    = ptxas\b.*fatal\s*:\s*  # optional RE2 before the message
//   cut_text = Unsupported .version # the message, literal, printable ASCII
//   cut_min  = 8                    # the shortest prefix that counts (default 12)
//   cut_tail = [\w.]*               # optional RE2: what may follow the whole cut_text, cut too
//                                   #   no `pattern`: it is generated (`after`, then a prefix
//                                   #   of cut_text of cut_min or more bytes, shorter than the
//                                   #   whole, at the end of the line); the summary gets a note
//                                   #   that the message was cut
//
//   infer    = frame                # a traceback frame of a known function: counts only when
//   pattern  = File "[^"]*/cpp_extension\.py", line \d+, in verify_ninja_availability
//   caller   = in run_ninja\b       #   the traceback lost its exception line; the innermost
//                                   #   such frame decides; optional `caller`: an outer frame of
//                                   #   the same traceback must match it
//
// Order matters: when several root causes (or symptoms) match one line, the first listed wins.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/diagnosis/signature.h"

namespace fleet::diagnosis {

// Parses catalogue text. `origin` names the text in errors, which read
// "ORIGIN:LINE: ..." and name the field (InvalidArgument). Patterns are checked when compiled
// (SignatureMatcher::Create), with the same ORIGIN:LINE.
absl::StatusOr<std::vector<Signature>> ParseSignatureCatalogue(std::string_view text,
                                                               std::string_view origin);

// The catalogue compiled into the binaries.
std::string_view BuiltinSignatureCatalogue();

// Structural patterns, numbered after the catalogue's signatures (index = size() + value).
enum class Structure { kNinjaFailed = 0, kTraceback, kFrame, kWorkerError, kIncludedFrom, kCount };

// The patterns a SignatureMatcher runs for `signatures`: theirs, in order, then the structural
// ones in the order of Structure.
std::vector<std::string> MatcherPatterns(const std::vector<Signature>& signatures);

}  // namespace fleet::diagnosis
