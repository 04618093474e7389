#include "daemon/planner/cuda_releases.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/string_view.h"
#include "common/log/log.h"

namespace fleet::daemon {

std::string CudaVersion::ToString() const { return absl::StrCat(major, ".", minor); }

std::optional<CudaVersion> ParseCudaVersion(std::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(AsAbsl(text), '.');
  CudaVersion v;
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[0], &v.major) ||
      !absl::SimpleAtoi(parts[1], &v.minor) || v.major < 0 || v.minor < 0) {
    return std::nullopt;
  }
  return v;
}

namespace {

bool IsPiece(std::string_view key) {
  return std::find(std::begin(kToolkitPieces), std::end(kToolkitPieces), key) !=
         std::end(kToolkitPieces);
}

// "name==version" with both parts non-empty (the agent validates the grammar before it runs pip).
std::optional<fleet::v1::Requirement> ParseRequirement(absl::string_view text) {
  std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(text, "==");
  if (parts.first.empty() || parts.second.empty() || absl::StrContains(parts.second, "=")) {
    return std::nullopt;
  }
  fleet::v1::Requirement r;
  r.set_name(std::string(parts.first));
  r.set_version(std::string(parts.second));
  return r;
}

}  // namespace

absl::StatusOr<CudaReleaseTable> CudaReleaseTable::Parse(std::string_view text,
                                                         std::string_view origin) {
  CudaReleaseTable table;
  enum class Section { kNone, kRelease, kSm, kTools } section = Section::kNone;
  int sm = 0;
  int line_number = 0;
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(AsAbsl(origin), ":", line_number, ": ", what));
  };
  for (absl::string_view line : absl::StrSplit(AsAbsl(text), '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    if (absl::ConsumePrefix(&line, "[")) {
      if (!absl::ConsumeSuffix(&line, "]")) return error("a section header without ']'");
      std::pair<absl::string_view, absl::string_view> header = absl::StrSplit(line, ' ');
      if (header.first == "release") {
        std::optional<CudaVersion> v = ParseCudaVersion(AsStd(header.second));
        if (!v) return error(absl::StrCat("'", header.second, "' is not a release X.Y"));
        if (!table.releases_.empty() && table.releases_.back().version >= *v) {
          return error(absl::StrCat("release ", v->ToString(), " is not above the one before"));
        }
        table.releases_.push_back({.version = *v});
        section = Section::kRelease;
      } else if (header.first == "sm") {
        if (!absl::SimpleAtoi(header.second, &sm) || sm <= 0) {
          return error(absl::StrCat("'", header.second, "' is not a compute capability major"));
        }
        section = Section::kSm;
      } else if (header.first == "tools" && header.second.empty()) {
        section = Section::kTools;
      } else {
        return error(absl::StrCat("unknown section [", line, "]"));
      }
      continue;
    }
    // The value is everything after the first '=' ("name==version" keeps its "==").
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) return error("expected key = value");
    const absl::string_view key = absl::StripAsciiWhitespace(line.substr(0, eq));
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(eq + 1));
    if (value.empty()) return error(absl::StrCat("'", key, "' has no value"));
    switch (section) {
      case Section::kNone:
        return error("a key before any section");
      case Section::kRelease: {
        CudaRelease& release = table.releases_.back();
        if (key == "ptx_isa") {
          std::optional<CudaVersion> isa = ParseCudaVersion(AsStd(value));
          if (!isa) return error(absl::StrCat("ptx_isa '", value, "' is not X.Y"));
          release.ptx_isa = *isa;
        } else if (IsPiece(AsStd(key))) {
          std::optional<fleet::v1::Requirement> r = ParseRequirement(value);
          if (!r) return error(absl::StrCat("'", value, "' is not name==version"));
          if (ParseCudaVersion(r->version()) != release.version) {
            return error(absl::StrCat(r->name(), "==", r->version(), " is not of release ",
                                      release.version.ToString()));
          }
          release.pip[std::string(key)] = *std::move(r);
        } else {
          return error(absl::StrCat("unknown release key '", key, "'"));
        }
        break;
      }
      case Section::kSm: {
        std::optional<CudaVersion> v = ParseCudaVersion(AsStd(value));
        if (key != "min_cuda" || !v) return error("expected min_cuda = X.Y");
        table.min_cuda_for_sm_[sm] = *v;
        break;
      }
      case Section::kTools:
        if (key == "ninja_pip") {
          std::optional<fleet::v1::Requirement> r = ParseRequirement(value);
          if (!r) return error(absl::StrCat("'", value, "' is not name==version"));
          table.ninja_pip_ = *std::move(r);
        } else if (key == "ninja_apt") {
          table.ninja_apt_ = std::string(value);
        } else {
          return error(absl::StrCat("unknown tools key '", key, "'"));
        }
        break;
    }
  }
  for (const CudaRelease& release : table.releases_) {
    if (release.ptx_isa == CudaVersion{}) {
      return absl::InvalidArgumentError(absl::StrCat(
          AsAbsl(origin), ": release ", release.version.ToString(), " has no ptx_isa"));
    }
    // A release is installed whole or not at all: a partial set would break the one-release rule.
    if (!release.pip.empty() && release.pip.size() != std::size(kToolkitPieces)) {
      return absl::InvalidArgumentError(absl::StrCat(AsAbsl(origin), ": release ",
                                                     release.version.ToString(),
                                                     " names some toolkit pieces but not all"));
    }
  }
  return table;
}

const CudaReleaseTable& CudaReleaseTable::Builtin() {
  static const CudaReleaseTable* const table = [] {
    absl::StatusOr<CudaReleaseTable> parsed = Parse(BuiltinCudaReleaseText(), "cuda_releases.conf");
    if (!parsed.ok()) {
      log::Get(log::Component::kRemediation)
          .critical("built-in CUDA release table: {}", parsed.status().message());
      std::abort();
    }
    return new CudaReleaseTable(*std::move(parsed));
  }();
  return *table;
}

const CudaRelease* CudaReleaseTable::Find(CudaVersion release) const {
  for (const CudaRelease& r : releases_) {
    if (r.version == release) return &r;
  }
  return nullptr;
}

std::optional<CudaVersion> CudaReleaseTable::PtxIsaOf(CudaVersion release) const {
  std::optional<CudaVersion> isa;
  for (const CudaRelease& r : releases_) {
    if (r.version <= release) isa = r.ptx_isa;
  }
  return isa;
}

std::optional<CudaVersion> CudaReleaseTable::MinReleaseForPtx(CudaVersion ptx_isa) const {
  for (const CudaRelease& r : releases_) {
    if (r.ptx_isa >= ptx_isa) return r.version;
  }
  return std::nullopt;
}

std::optional<CudaVersion> CudaReleaseTable::MinReleaseForGpu(
    CudaVersion compute_capability) const {
  auto it = min_cuda_for_sm_.find(compute_capability.major);
  if (it == min_cuda_for_sm_.end()) return std::nullopt;
  return it->second;
}

std::string CudaReleaseTable::PieceOfPackage(std::string_view package) const {
  for (const CudaRelease& r : releases_) {
    for (const auto& [piece, requirement] : r.pip) {
      if (requirement.name() == package) return piece;
    }
  }
  return "";
}

}  // namespace fleet::daemon
