#include "common/base/secret_names.h"

#include "gtest/gtest.h"

namespace fleet {
namespace {

TEST(SecretNames, NamesThatHoldSecrets) {
  for (const char* secret :
       {"HF_TOKEN", "hf_token", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "OPENAI_API_KEY",
        "AWS_SECRET_ACCESS_KEY", "aws_secret_key", "CLIENT_SECRET", "SECRET", "DB_PASSWORD",
        "PASSWORD", "PGPASSWORD", "my_password_file", "DB_PASSWD", "GOOGLE_APPLICATION_CREDENTIALS",
        "REGISTRY_AUTH", "PROXY_AUTHORIZATION", "SESSION_COOKIE", "WANDB_APIKEY"}) {
    EXPECT_TRUE(IsSecretEnvName(secret)) << secret;
  }
}

TEST(SecretNames, NamesThatDoNot) {
  for (const char* plain :
       {"PATH", "TOKEN", "KEY", "TOKENIZERS_PARALLELISM", "KEYRING_BACKEND", "CUDA_HOME",
        "HF_TOKEN_PATH", "API_KEY_ID", "SSH_AUTH_SOCK", "CUDA_VISIBLE_DEVICES", "_TOKEN", ""}) {
    EXPECT_FALSE(IsSecretEnvName(plain)) << plain;
  }
}

TEST(SecretNames, RedactsValuesOfSecretsOnly) {
  EXPECT_EQ(RedactedEnv({{"PATH", "/usr/bin"}, {"HF_TOKEN", "hf_abc"}}),
            (std::map<std::string, std::string>{{"PATH", "/usr/bin"}, {"HF_TOKEN", "<redacted>"}}));
  EXPECT_EQ(RedactedEnvValue("OPENAI_API_KEY", "sk-1"), "<redacted>");
  EXPECT_EQ(RedactedEnvValue("CUDA_HOME", "/usr/local/cuda"), "/usr/local/cuda");
}

using Env = std::map<std::string, std::string>;

TEST(SecretNames, MasksEnvironmentValues) {
  const Env env = {{"PATH", "/usr/bin"}, {"HF_TOKEN", "hf_abcdef"}, {"DB_PASSWORD", "pw"}};
  EXPECT_EQ(RedactedEnv(env),
            (Env{{"PATH", "/usr/bin"}, {"HF_TOKEN", "<redacted>"}, {"DB_PASSWORD", "<redacted>"}}));
}

TEST(SecretNames, MasksEveryOccurrenceOfASecretValueInText) {
  const Env env = {{"PATH", "/usr/bin"},
                   {"HF_TOKEN", "hf_abcdef"},
                   {"OTHER_TOKEN", "hf_abcdef_longer"},
                   {"SHORT_KEY", "abc"},
                   {"EMPTY_KEY", ""}};
  EXPECT_EQ(
      RedactSecretValues("a hf_abcdef b hf_abcdefhf_abcdef c hf_abcdef_longer /usr/bin abc", env),
      "a <redacted> b <redacted><redacted> c <redacted> /usr/bin abc");
  EXPECT_EQ(RedactSecretValues("nothing here", env), "nothing here");
  EXPECT_EQ(RedactSecretValues("", env), "");
}

}  // namespace
}  // namespace fleet
