// Test helpers for the diagnosis engine: classify a text with the built-in catalogue.
#pragma once

#include <memory>
#include <string_view>

#include "common/diagnosis/classifier.h"
#include "common/diagnosis/signature_matcher.h"
#include "gtest/gtest.h"

namespace fleet::diagnosis {

inline const SignatureMatcher& BuiltinMatcher() { return SignatureMatcher::Builtin(); }

inline Diagnosis ClassifyText(std::string_view text, ClassifierOptions options = {}) {
  Classifier c(&BuiltinMatcher(), options);
  c.AddBytes(text);
  return c.Finish();
}

}  // namespace fleet::diagnosis
