#include "cli/server_table.h"

#include "cli/status_format.h"
#include "common/state/states.h"
#include "google/protobuf/util/message_differencer.h"

namespace fleet::cli {

ServerTable::Update ServerTable::Apply(const v1::FleetStatusResponse& message) {
  Update update;
  if (std::optional<absl::Time> at = FromProtoTime(message.at())) at_ = at;
  for (const std::string& name : message.removed()) {
    auto it = index_.find(name);
    if (it == index_.end()) continue;
    rows_.erase(rows_.begin() + static_cast<std::ptrdiff_t>(it->second));
    index_.clear();
    for (size_t i = 0; i < rows_.size(); ++i) index_[rows_[i]->server()] = i;
    update.removed.push_back(name);
  }
  for (const v1::ServerRow& row : message.servers()) {
    auto it = index_.find(row.server());
    if (it == index_.end()) {
      index_[row.server()] = rows_.size();
      rows_.push_back(std::make_unique<v1::ServerRow>(row));
      update.changed.push_back(rows_.back().get());
      continue;
    }
    v1::ServerRow* held = rows_[it->second].get();
    if (google::protobuf::util::MessageDifferencer::Equals(*held, row)) continue;
    *held = row;
    update.changed.push_back(held);
  }
  return update;
}

std::vector<const v1::ServerRow*> ServerTable::rows() const {
  std::vector<const v1::ServerRow*> out;
  out.reserve(rows_.size());
  for (const auto& row : rows_) out.push_back(row.get());
  return out;
}

ServerTable::Readiness ServerTable::Evaluate() const {
  if (rows_.empty()) return Readiness::kWaiting;
  bool all_ready = true;
  bool any_ready = false;
  for (const auto& row : rows_) {
    const v1::ServerState state = ServerStateOf(*row);
    if (state == v1::SERVER_STATE_GAVE_UP) return Readiness::kGaveUp;
    if (state == v1::SERVER_STATE_READY) {
      any_ready = true;
    } else if (state != v1::SERVER_STATE_STOPPED) {
      all_ready = false;
    }
  }
  if (!all_ready) return Readiness::kWaiting;
  return any_ready ? Readiness::kReady : Readiness::kAllStopped;
}

std::vector<const v1::ServerRow*> ServerTable::GaveUp() const {
  std::vector<const v1::ServerRow*> out;
  for (const auto& row : rows_) {
    if (ServerStateOf(*row) == v1::SERVER_STATE_GAVE_UP) out.push_back(row.get());
  }
  return out;
}

}  // namespace fleet::cli
