// Classifying a whole log file, read in fixed-size chunks so memory stays bounded whatever its
// size (no mapping: mapped pages would count as resident memory).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/diagnosis/classifier.h"
#include "common/diagnosis/diagnosis.h"
#include "common/diagnosis/signature_matcher.h"

namespace fleet::diagnosis {

inline constexpr size_t kReadChunkBytes = 1 << 20;

// Reads `fd` to its end through a classifier and returns the final diagnosis. `name` names the
// input in errors.
absl::StatusOr<Diagnosis> ClassifyFd(int fd, std::string_view name, const SignatureMatcher& matcher,
                                     const ClassifierOptions& options = {});

// The file at `path`, or standard input when `path` is "-". NotFound / PermissionDenied /
// InvalidArgument (a directory) name the file.
absl::StatusOr<Diagnosis> ClassifyFile(const std::string& path, const SignatureMatcher& matcher,
                                       const ClassifierOptions& options = {});

}  // namespace fleet::diagnosis
