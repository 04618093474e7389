#include "common/config/yaml_message_reader.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/string_view.h"
#include "common/config/config_duration.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/duration.pb.h"

// GCC 12 warns (-Wdangling-pointer) about yaml-cpp 0.7's own node code (node/impl.h) once it is
// inlined here; the warning is silenced for its headers only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#endif
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace fleet::config {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// 1-based; 0 when yaml-cpp has no position for the node.
int LineOf(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? 0 : mark.line + 1;
}

// A scalar as an error message quotes it: escaped, and cut when long.
std::string QuotedExcerpt(const std::string& text) {
  constexpr size_t kMax = 60;
  std::string shown = absl::CHexEscape(text.size() > kMax ? text.substr(0, kMax) : text);
  return absl::StrCat("'", shown, text.size() > kMax ? "...'" : "'");
}

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return QuotedExcerpt(node.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Undefined:
      break;
  }
  return "an undefined value";
}

bool IsDuration(const FieldDescriptor* field) {
  return field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
         field->message_type()->full_name() ==
             google::protobuf::Duration::descriptor()->full_name();
}

// How a config names an enum value: lower case (`ssh_tunnel`).
std::string YamlEnumName(const EnumValueDescriptor* value) {
  return absl::AsciiStrToLower(value->name());
}

std::vector<std::string> YamlEnumNames(const EnumDescriptor* type) {
  std::vector<std::string> names;
  for (int i = 0; i < type->value_count(); ++i) {
    if (type->value(i)->number() == 0) continue;  // *_UNSPECIFIED: "not given", never written
    names.push_back(YamlEnumName(type->value(i)));
  }
  return names;
}

std::vector<std::string> FieldNames(const Descriptor* type) {
  std::vector<std::string> names;
  for (int i = 0; i < type->field_count(); ++i) names.push_back(type->field(i)->name());
  return names;
}

// What a value of `field` looks like, for "expected ..., got ...".
std::string ExpectedKind(const FieldDescriptor* field) {
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
      return "an integer";
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return "a non-negative integer";
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return "a number";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return absl::StrCat("one of ", absl::StrJoin(YamlEnumNames(field->enum_type()), ", "));
    case FieldDescriptor::CPPTYPE_STRING:
      return "a string";
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (IsDuration(field)) return "a duration";
      return absl::StrCat("a map of ", field->message_type()->name(), " fields");
  }
  return "a value";
}

// An integer's text as written: an optional sign, then digits (so that "99999999999" is "out of
// range", not "not an integer").
bool LooksIntegral(absl::string_view text) {
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) text.remove_prefix(1);
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

class Reader {
 public:
  explicit Reader(SourceMap* source_map) : source_map_(source_map) {}

  // `line`: where the message is, for errors about the node as a whole.
  void ReadMessage(const YAML::Node& node, int line, Message* message, const std::string& path) {
    const Descriptor* type = message->GetDescriptor();
    if (node.IsNull()) return;
    if (!node.IsMap()) {
      Error(line, path,
            absl::StrCat("expected a map of ", type->name(), " fields, got ", Describe(node)));
      return;
    }
    absl::flat_hash_map<std::string, int> seen;  // key -> line
    absl::flat_hash_map<int, std::string> oneofs_set;
    for (auto it = node.begin(); it != node.end(); ++it) {
      // Copies: the iterator yields a temporary pair (yaml-cpp), gone after this statement.
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      const int key_line = LineOf(key) > 0 ? LineOf(key) : line;
      if (!key.IsScalar()) {
        Error(key_line, path, absl::StrCat("keys must be field names, got ", Describe(key)));
        continue;
      }
      const std::string& name = key.Scalar();
      const std::string field_path = FieldPath(path, name);
      auto [first, inserted] = seen.try_emplace(name, key_line);
      if (!inserted) {
        Error(key_line, field_path,
              absl::StrCat("duplicate key (first at line ", first->second, ")"));
        continue;
      }
      const FieldDescriptor* field = type->FindFieldByName(name);
      if (field == nullptr && name == "<<") {
        Error(key_line, path, "YAML merge keys ('<<') are not supported: write the fields out");
        continue;
      }
      if (field == nullptr) {
        const std::vector<std::string> names = FieldNames(type);
        Error(key_line, path,
              absl::StrCat("unknown field ", QuotedExcerpt(name), DidYouMean(name, names), "; ",
                           type->name(), " has: ", absl::StrJoin(names, ", ")));
        continue;
      }
      if (value.IsNull()) continue;  // the same as leaving the key out
      if (const auto* oneof = field->real_containing_oneof(); oneof != nullptr) {
        auto [other, fresh] = oneofs_set.try_emplace(oneof->index(), name);
        if (!fresh) {
          Error(key_line, field_path,
                absl::StrCat("only one of the fields of '", oneof->name(), "' may be given, and '",
                             other->second, "' is"));
          continue;
        }
      }
      if (source_map_ != nullptr) source_map_->Record(field_path, key_line);
      ReadField(value, key_line, message, field, field_path);
    }
  }

  std::vector<ConfigError> TakeErrors() { return std::move(errors_); }

  void Error(int line, std::string path, std::string what) {
    errors_.push_back(ConfigError{std::move(path), std::move(what), line});
  }

 private:
  void ReadField(const YAML::Node& node, int key_line, Message* message,
                 const FieldDescriptor* field, const std::string& path) {
    const int line = LineOf(node) > 0 ? LineOf(node) : key_line;
    if (field->is_map()) {
      ReadMap(node, line, message, field, path);
    } else if (field->is_repeated()) {
      if (!node.IsSequence()) {
        Error(line, path,
              absl::StrCat("expected a list of ", ExpectedKindPlural(field), ", got ",
                           Describe(node)));
        return;
      }
      int index = 0;
      for (auto it = node.begin(); it != node.end(); ++it, ++index) {
        const YAML::Node& element = *it;
        const std::string element_path = IndexPath(path, index);
        const int element_line = LineOf(element) > 0 ? LineOf(element) : line;
        if (element.IsNull()) {
          Error(element_line, element_path,
                absl::StrCat("expected ", ExpectedKind(field), ", got nothing"));
          continue;
        }
        if (source_map_ != nullptr) source_map_->Record(element_path, element_line);
        ReadValue(element, element_line, message, field, element_path);
      }
    } else {
      ReadValue(node, line, message, field, path);
    }
  }

  void ReadMap(const YAML::Node& node, int line, Message* message, const FieldDescriptor* field,
               const std::string& path) {
    const Descriptor* entry_type = field->message_type();
    const FieldDescriptor* key_field = entry_type->map_key();
    const FieldDescriptor* value_field = entry_type->map_value();
    if (!node.IsMap()) {
      Error(line, path, absl::StrCat("expected a map, got ", Describe(node)));
      return;
    }
    absl::flat_hash_map<std::string, int> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      // Copies: the iterator yields a temporary pair (yaml-cpp), gone after this statement.
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      const int key_line = LineOf(key) > 0 ? LineOf(key) : line;
      if (!key.IsScalar()) {
        Error(key_line, path, absl::StrCat("map keys must be scalars, got ", Describe(key)));
        continue;
      }
      const std::string entry_path = KeyPath(path, key.Scalar());
      auto [first, inserted] = seen.try_emplace(key.Scalar(), key_line);
      if (!inserted) {
        Error(key_line, entry_path,
              absl::StrCat("duplicate key (first at line ", first->second, ")"));
        continue;
      }
      if (value.IsNull()) {
        Error(key_line, entry_path,
              absl::StrCat("expected ", ExpectedKind(value_field), ", got nothing",
                           value_field->cpp_type() == FieldDescriptor::CPPTYPE_STRING
                               ? " (write \"\" for an empty string)"
                               : ""));
        continue;
      }
      if (source_map_ != nullptr) source_map_->Record(entry_path, key_line);
      Message* entry = message->GetReflection()->AddMessage(message, field);
      ReadValue(key, key_line, entry, key_field, entry_path);
      const int value_line = LineOf(value) > 0 ? LineOf(value) : key_line;
      ReadValue(value, value_line, entry, value_field, entry_path);
    }
  }

  static std::string ExpectedKindPlural(const FieldDescriptor* field) {
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64:
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64:
        return "integers";
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT:
        return "numbers";
      case FieldDescriptor::CPPTYPE_BOOL:
        return "booleans";
      case FieldDescriptor::CPPTYPE_ENUM:
        return absl::StrCat(field->enum_type()->name(), " names");
      case FieldDescriptor::CPPTYPE_STRING:
        return "strings";
      case FieldDescriptor::CPPTYPE_MESSAGE:
        if (IsDuration(field)) return "durations";
        return absl::StrCat(field->message_type()->name(), " entries");
    }
    return "values";
  }

  // One value of `field`: the field itself when singular, a new element when repeated.
  void ReadValue(const YAML::Node& node, int line, Message* message, const FieldDescriptor* field,
                 const std::string& path) {
    const Reflection* reflection = message->GetReflection();
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (IsDuration(field)) {
        if (!node.IsScalar()) {
          Error(line, path, absl::StrCat("expected a duration, got ", Describe(node)));
          return;
        }
        absl::StatusOr<absl::Duration> d = ParseConfigDuration(node.Scalar());
        if (!d.ok()) {
          Error(line, path, std::string(d.status().message()));
          return;
        }
        Message* out = field->is_repeated() ? reflection->AddMessage(message, field)
                                            : reflection->MutableMessage(message, field);
        out->CopyFrom(ToProtoDuration(*d));
        return;
      }
      Message* out = field->is_repeated() ? reflection->AddMessage(message, field)
                                          : reflection->MutableMessage(message, field);
      ReadMessage(node, line, out, path);
      return;
    }
    if (!node.IsScalar()) {
      Error(line, path, absl::StrCat("expected ", ExpectedKind(field), ", got ", Describe(node)));
      return;
    }
    const std::string& text = node.Scalar();
    const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
    const bool repeated = field->is_repeated();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64: {
        int64_t v = 0;
        if (!absl::SimpleAtoi(trimmed, &v)) {
          BadInteger(line, path, field, text);
          return;
        }
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT32) {
          if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
            BadInteger(line, path, field, text);
            return;
          }
          const auto v32 = static_cast<int32_t>(v);
          repeated ? reflection->AddInt32(message, field, v32)
                   : reflection->SetInt32(message, field, v32);
        } else {
          repeated ? reflection->AddInt64(message, field, v)
                   : reflection->SetInt64(message, field, v);
        }
        return;
      }
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64: {
        uint64_t v = 0;
        if (trimmed.empty() || trimmed[0] == '-' || !absl::SimpleAtoi(trimmed, &v)) {
          BadInteger(line, path, field, text);
          return;
        }
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_UINT32) {
          if (v > std::numeric_limits<uint32_t>::max()) {
            BadInteger(line, path, field, text);
            return;
          }
          const auto v32 = static_cast<uint32_t>(v);
          repeated ? reflection->AddUInt32(message, field, v32)
                   : reflection->SetUInt32(message, field, v32);
        } else {
          repeated ? reflection->AddUInt64(message, field, v)
                   : reflection->SetUInt64(message, field, v);
        }
        return;
      }
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT: {
        double v = 0;
        if (!absl::SimpleAtod(trimmed, &v)) {
          Error(line, path, absl::StrCat("expected a number, got ", QuotedExcerpt(text)));
          return;
        }
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
          repeated ? reflection->AddDouble(message, field, v)
                   : reflection->SetDouble(message, field, v);
        } else {
          const auto f = static_cast<float>(v);
          repeated ? reflection->AddFloat(message, field, f)
                   : reflection->SetFloat(message, field, f);
        }
        return;
      }
      case FieldDescriptor::CPPTYPE_BOOL: {
        bool v = false;
        if (trimmed == "true" || trimmed == "True" || trimmed == "TRUE") {
          v = true;
        } else if (trimmed == "false" || trimmed == "False" || trimmed == "FALSE") {
          v = false;
        } else {
          Error(line, path, absl::StrCat("expected true or false, got ", QuotedExcerpt(text)));
          return;
        }
        repeated ? reflection->AddBool(message, field, v) : reflection->SetBool(message, field, v);
        return;
      }
      case FieldDescriptor::CPPTYPE_ENUM: {
        const EnumDescriptor* type = field->enum_type();
        std::string wanted(trimmed);
        std::replace(wanted.begin(), wanted.end(), '-', '_');
        for (int i = 0; i < type->value_count(); ++i) {
          const EnumValueDescriptor* value = type->value(i);
          if (value->number() != 0 && YamlEnumName(value) == wanted) {
            repeated ? reflection->AddEnumValue(message, field, value->number())
                     : reflection->SetEnumValue(message, field, value->number());
            return;
          }
        }
        const std::vector<std::string> names = YamlEnumNames(type);
        Error(line, path,
              absl::StrCat("expected one of ", absl::StrJoin(names, ", "), ", got ",
                           QuotedExcerpt(text), DidYouMean(text, names)));
        return;
      }
      case FieldDescriptor::CPPTYPE_STRING:
        repeated ? reflection->AddString(message, field, text)
                 : reflection->SetString(message, field, text);
        return;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        break;  // handled above
    }
  }

  void BadInteger(int line, const std::string& path, const FieldDescriptor* field,
                  const std::string& text) {
    const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
    if (!LooksIntegral(trimmed)) {
      Error(line, path,
            absl::StrCat("expected ", ExpectedKind(field), ", got ", QuotedExcerpt(text)));
      return;
    }
    std::string range;
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        range = absl::StrCat(std::numeric_limits<int32_t>::min(), "..",
                             std::numeric_limits<int32_t>::max());
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        range = absl::StrCat(std::numeric_limits<int64_t>::min(), "..",
                             std::numeric_limits<int64_t>::max());
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        range = absl::StrCat("0..", std::numeric_limits<uint32_t>::max());
        break;
      default:
        range = absl::StrCat("0..", std::numeric_limits<uint64_t>::max());
        break;
    }
    Error(line, path, absl::StrCat("out of range: ", QuotedExcerpt(text), " is not in ", range));
  }

  SourceMap* source_map_;
  std::vector<ConfigError> errors_;
};

// A document past the limits, found by LimitChecker (thrown from inside yaml-cpp's parser, which
// has no other way to stop early, and caught below).
struct LimitExceeded {
  int line;
  std::string message;
};

// Walks the parser's events (no nodes are built) and stops the parse at the first limit passed:
// nesting deeper than kMaxYamlDepth, or more than kMaxYamlNodes nodes once every alias stands for
// the nodes of what it names (an alias of an alias of ... is counted at its full size, which is
// what walking it would cost).
class LimitChecker : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { Leaf(mark, anchor, 1); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = sizes_.find(anchor);
    // An alias of an anchor still open (a recursive alias): yaml-cpp refuses it itself.
    Leaf(mark, 0, it == sizes_.end() ? 1 : it->second);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    Leaf(mark, anchor, 1);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Open_ {
    YAML::anchor_t anchor;
    int64_t nodes;  // this collection and everything in it, aliases expanded
  };

  void Count(const YAML::Mark& mark, int64_t nodes) {
    total_ += nodes;
    if (!open_.empty()) open_.back().nodes += nodes;
    if (total_ > kMaxYamlNodes) {
      throw LimitExceeded{mark.is_null() ? 0 : mark.line + 1,
                          absl::StrCat("the document holds more than ", kMaxYamlNodes,
                                       " nodes once its aliases are expanded (a config needs far "
                                       "fewer; aliases of aliases multiply)")};
    }
  }
  void Leaf(const YAML::Mark& mark, YAML::anchor_t anchor, int64_t nodes) {
    Count(mark, nodes);
    if (anchor != 0) sizes_[anchor] = nodes;
  }
  void Open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (static_cast<int>(open_.size()) >= kMaxYamlDepth) {
      throw LimitExceeded{mark.is_null() ? 0 : mark.line + 1,
                          absl::StrCat("nested more than ", kMaxYamlDepth,
                                       " levels deep (a config needs fewer than 10)")};
    }
    Count(mark, 1);
    open_.push_back({anchor, 1});
  }
  void Close() {
    if (open_.empty()) return;
    const Open_ done = open_.back();
    open_.pop_back();
    if (!open_.empty()) open_.back().nodes += done.nodes;
    if (done.anchor != 0) sizes_[done.anchor] = done.nodes;
  }

  std::vector<Open_> open_;
  absl::flat_hash_map<YAML::anchor_t, int64_t> sizes_;
  int64_t total_ = 0;
};

}  // namespace

std::vector<ConfigError> ReadYamlMessage(std::string_view yaml, Message* message,
                                         SourceMap* source_map) {
  message->Clear();
  Reader reader(source_map);
  if (yaml.size() > kMaxYamlBytes) {
    reader.Error(0, "",
                 absl::StrCat("the document has more than ", kMaxYamlBytes, " bytes (",
                              kMaxYamlBytes >> 20, " MiB), the most a config may have"));
    return reader.TakeErrors();
  }
  std::vector<YAML::Node> documents;
  // yaml-cpp reports malformed input by throwing; its exceptions stop here.
  try {
    // Limits first, on the parser's events: nothing is built for a document past them.
    {
      std::istringstream stream{std::string(yaml)};
      YAML::Parser parser(stream);
      LimitChecker limits;
      while (parser.HandleNextDocument(limits)) {
      }
    }
    documents = YAML::LoadAll(std::string(yaml));
  } catch (const LimitExceeded& e) {
    reader.Error(e.line, "", e.message);
    return reader.TakeErrors();
  } catch (const YAML::Exception& e) {
    reader.Error(e.mark.is_null() ? 0 : e.mark.line + 1, "",
                 absl::StrCat("malformed YAML: ", e.msg));
    return reader.TakeErrors();
  } catch (const std::exception& e) {
    reader.Error(0, "", absl::StrCat("malformed YAML: ", e.what()));
    return reader.TakeErrors();
  }
  if (source_map != nullptr) source_map->Record("", 1);
  // An empty document (a stray `---` at the end) holds nothing to misread.
  documents.erase(std::remove_if(documents.begin() + (documents.empty() ? 0 : 1), documents.end(),
                                 [](const YAML::Node& d) { return d.IsNull(); }),
                  documents.end());
  if (documents.size() > 1) {
    reader.Error(LineOf(documents[1]), "",
                 absl::StrCat("expected one YAML document, found ", documents.size(),
                              " (the second starts here)"));
    return reader.TakeErrors();
  }
  if (documents.empty()) return {};
  const int line = LineOf(documents[0]) > 0 ? LineOf(documents[0]) : 1;
  reader.ReadMessage(documents[0], line, message, "");
  return reader.TakeErrors();
}

}  // namespace fleet::config
