// Renderers of a Diagnosis: the `fleetctl explain -o json` object (a contract, docs/design.md
// "`fleetctl explain` JSON") and the human text. Shared by the CLI (files) and, later, stored
// evidence.
#pragma once

#include <string>
#include <string_view>

#include "common/diagnosis/diagnosis.h"

namespace fleet::diagnosis {

// Appends one JSON object, without a newline, with exactly the contract's fields in this order:
// file, class, root_cause_line, summary, facts, evidence, symptoms, toolchain_fix. A fact with one
// value is a string, with several an array; `packages` is an object {name: version}.
// `with_confidence` (fleetctl explain --confidence) adds one field after them, `confidence`
// ("high" or "low"); without it the object is exactly the contract's.
void AppendExplainJson(std::string_view file, const Diagnosis& d, std::string* out,
                       bool with_confidence = false);

// The human report: class and fix kind, the cause in one sentence, the facts, the evidence with
// line numbers (the root-cause line marked), the symptoms seen and skipped, where the log ended.
// A low-confidence diagnosis says so in a `confidence:` line under the cause.
// `color` adds ANSI colours for a terminal.
std::string FormatExplainText(std::string_view file, const Diagnosis& d, bool color);

}  // namespace fleet::diagnosis
