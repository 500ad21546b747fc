// The client config: where cartd's address, the token and the TLS CA come from (flags over the
// environment over the file), and what a malformed file gets.

#include "rpc/client_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "tests/support/test_support.h"

namespace cart::rpc {
namespace {

using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Sets the CART_* variables for one test and clears them after it.
class ClientConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* name : {"CART_SERVER", "CART_TOKEN", "CART_TLS_CA"}) unsetenv(name);
  }
  TempDir dir_;
};

TEST_F(ClientConfigTest, FlagsWinOverTheEnvironmentWhichWinsOverTheFile) {
  const std::string file = dir_.File("client.yaml");
  ::cart::testing::WriteFile(
      file, "server: file-host:1\ntoken: file-token-0123456789\ntls_ca: /file/ca.pem\n");
  // The file alone.
  CART_ASSERT_OK_AND_ASSIGN(ClientConfig c, ResolveClientConfig(ClientFlags(), file));
  EXPECT_EQ(c.server, "file-host:1");
  EXPECT_EQ(c.token, "file-token-0123456789");
  EXPECT_EQ(c.tls_ca, "/file/ca.pem");
  // The environment over it.
  setenv("CART_SERVER", "env-host:2", 1);
  setenv("CART_TOKEN", "env-token-0123456789", 1);
  CART_ASSERT_OK_AND_ASSIGN(c, ResolveClientConfig(ClientFlags(), file));
  EXPECT_EQ(c.server, "env-host:2");
  EXPECT_EQ(c.token, "env-token-0123456789");
  EXPECT_EQ(c.tls_ca, "/file/ca.pem");
  // Flags over both, field by field.
  ClientConfig flags = ClientFlags();
  flags.token = "flag-token-0123456789";
  CART_ASSERT_OK_AND_ASSIGN(c, ResolveClientConfig(flags, file));
  EXPECT_EQ(c.server, "env-host:2");
  EXPECT_EQ(c.token, "flag-token-0123456789");
}

// Before, a --server equal to the default address was taken for "not given" and lost to
// CART_SERVER; callers had to clear the default first to make that rule hold at all.
TEST_F(ClientConfigTest, AServerFlagEqualToTheDefaultStillWins) {
  setenv("CART_SERVER", "env-host:2", 1);
  ClientConfig flags = ClientFlags();
  flags.server = ClientConfig().server;  // --server 127.0.0.1:7070, typed out
  CART_ASSERT_OK_AND_ASSIGN(ClientConfig c, ResolveClientConfig(flags, dir_.File("missing.yaml")));
  EXPECT_EQ(c.server, ClientConfig().server);
  // Nothing given anywhere: the default.
  unsetenv("CART_SERVER");
  CART_ASSERT_OK_AND_ASSIGN(c, ResolveClientConfig(ClientFlags(), dir_.File("missing.yaml")));
  EXPECT_EQ(c.server, ClientConfig().server);
}

TEST_F(ClientConfigTest, AMalformedFileIsRefusedNamingFileAndLine) {
  EXPECT_THAT(ParseClientConfig("server: a:1\nsevrer: b:2\n", "client.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("client.yaml:2"), HasSubstr("unknown key 'sevrer'"))));
  EXPECT_THAT(ParseClientConfig("server: [a, b]\n", "client.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected a single value")));
  EXPECT_THAT(ParseClientConfig("- a\n- b\n", "client.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a map")));
  EXPECT_THAT(ParseClientConfig("server: a:1\nserver: b:2\n", "client.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("client.yaml:2")));
}

}  // namespace
}  // namespace cart::rpc
