// StatementAdapter: a sql::StatementImpl over an engine's own Statement (fleet::sqlite's or
// fleet::postgres's, which have the same operations). Include only from the adapters' .cc files.
#pragma once

#include <utility>

#include "common/sql/connection.h"

namespace fleet::sql {

template <typename EngineStatement>
class StatementAdapter final : public StatementImpl {
 public:
  explicit StatementAdapter(EngineStatement st) : st_(std::move(st)) {}
  void Bind(int index, int64_t value) override { st_.Bind(index, value); }
  void Bind(int index, std::string_view text) override { st_.Bind(index, text); }
  void BindBlob(int index, std::string_view bytes) override { st_.BindBlob(index, bytes); }
  void BindNull(int index) override { st_.BindNull(index); }
  absl::StatusOr<bool> Step() override { return st_.Step(); }
  absl::Status Run() override { return st_.Run(); }
  void Reset() override { st_.Reset(); }
  int64_t ColumnInt(int index) const override { return st_.ColumnInt(index); }
  std::string ColumnText(int index) const override { return st_.ColumnText(index); }
  std::string ColumnBlob(int index) const override { return st_.ColumnBlob(index); }
  bool ColumnIsNull(int index) const override { return st_.ColumnIsNull(index); }

 private:
  EngineStatement st_;
};

}  // namespace fleet::sql
