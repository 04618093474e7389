#include "common/config/secret_redaction.h"

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace fleet::config {
namespace {

TEST(RedactPlan, SecretEnvValuesAreMaskedInActionsChangesResultsAndText) {
  fleet::v1::Plan plan;
  auto* set = plan.add_actions()->mutable_action()->mutable_set_env();
  set->set_name("HF_TOKEN");
  set->set_value("hf_supersecret");
  auto* plain = plan.add_actions()->mutable_action()->mutable_set_env();
  plain->set_name("CUDA_HOME");
  plain->set_value("/usr/local/cuda");
  (*plan.mutable_env_changes())["HF_TOKEN"] = "hf_supersecret";
  (*plan.mutable_env_changes())["CUDA_HOME"] = "/usr/local/cuda";
  auto* result = plan.add_results();
  result->mutable_action()->mutable_set_env()->set_name("OPENAI_API_KEY");
  result->mutable_action()->mutable_set_env()->set_value("sk-another");
  result->set_message("set OPENAI_API_KEY=sk-another");
  plan.set_summary("set_env HF_TOKEN=hf_supersecret, CUDA_HOME=/usr/local/cuda");
  plan.add_unresolved("needs set_env (set_env HF_TOKEN=hf_supersecret)");

  RedactPlan(&plan);
  const std::string bytes = plan.SerializeAsString();
  EXPECT_EQ(bytes.find("hf_supersecret"), std::string::npos);
  EXPECT_EQ(bytes.find("sk-another"), std::string::npos);
  EXPECT_EQ(plan.actions(0).action().set_env().value(), "<redacted>");
  EXPECT_EQ(plan.actions(1).action().set_env().value(), "/usr/local/cuda");
  EXPECT_EQ(plan.env_changes().at("HF_TOKEN"), "<redacted>");
  EXPECT_EQ(plan.env_changes().at("CUDA_HOME"), "/usr/local/cuda");
  EXPECT_EQ(plan.results(0).action().set_env().value(), "<redacted>");
  EXPECT_EQ(plan.results(0).message(), "set OPENAI_API_KEY=<redacted>");
  EXPECT_EQ(plan.summary(), "set_env HF_TOKEN=<redacted>, CUDA_HOME=/usr/local/cuda");

  fleet::v1::Plan again = plan;
  RedactPlan(&again);  // idempotent
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(again, plan));
}

}  // namespace
}  // namespace fleet::config
