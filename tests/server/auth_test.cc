// Security (docs/design.md "Security"): bearer tokens with roles on every RPC, TLS with a test CA
// made by the openssl CLI, the refusal to listen beyond loopback without TLS and tokens, and the
// config file.

#include "server/auth.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <set>

#include "common/file.h"
#include "common/strings.h"
#include "store/run_store.h"
#include "tests/server/server_fixture.h"

namespace cart::server::testing {
namespace {

using ::cart::testing::ReadFile;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::cart::testing::WriteFile;
using ::testing::HasSubstr;

constexpr char kWorkerToken[] = "worker-token-0123456789";
constexpr char kUserToken[] = "user-token-0123456789ab";
constexpr char kAdminToken[] = "admin-token-0123456789a";
constexpr char kOtherWorkerToken[] = "worker-token-box4-56789";

TEST(TokenTableTest, ParsesTokensRolesAndNames) {
  CART_ASSERT_OK_AND_ASSIGN(
      TokenTable table,
      TokenTable::Parse("# comment\n\nworker-token-0123456789 worker box3\n"
                        "user-token-0123456789ab\tuser  alice  # trailing comment\n",
                        "tokens"));
  EXPECT_EQ(table.size(), 2u);
  CART_ASSERT_OK_AND_ASSIGN(Principal alice,
                            table.Check("Bearer user-token-0123456789ab", Api::kScheduler, "m"));
  EXPECT_EQ(alice.name, "alice");
  EXPECT_EQ(alice.role, Role::kUser);
}

TEST(TokenTableTest, MalformedLinesNameFileAndLine) {
  EXPECT_THAT(TokenTable::Parse("abcdefghijklmnopq worker\n", "t.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.txt:1:")));
  EXPECT_THAT(TokenTable::Parse("\nabcdefghijklmnopq root bob\n", "t.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.txt:2: role 'root'")));
  EXPECT_THAT(TokenTable::Parse("short worker bob\n", "t.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least 16")));
  EXPECT_THAT(TokenTable::Parse("abcdefghijklmnopq worker a\nabcdefghijklmnopq user b\n", "t.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("also the token of 'a'")));
  // Worker names that cover each other's ids; the same name twice (a rotated token) is fine.
  EXPECT_THAT(TokenTable::Parse("abcdefghijklmnopq worker lab\nbcdefghijklmnopqr worker lab-box3\n",
                                "t.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t.txt:2: worker names 'lab-box3' and 'lab' overlap")));
  EXPECT_TRUE(TokenTable::Parse("abcdefghijklmnopq worker lab\nbcdefghijklmnopqr worker lab\n"
                                "cdefghijklmnopqrs worker labbox\ndefghijklmnopqrst user lab-x\n",
                                "t.txt")
                  .ok());
}

TEST(MayActAsTest, WorkerTokensCoverTheirNameAndItsChildren) {
  const Principal box3{"box3", Role::kWorker};
  EXPECT_TRUE(MayActAs(box3, "box3"));
  EXPECT_TRUE(MayActAs(box3, "box3-gpu0"));
  EXPECT_TRUE(MayActAs(box3, "box3.1"));
  EXPECT_FALSE(MayActAs(box3, "box30"));  // another box whose name starts the same
  EXPECT_FALSE(MayActAs(box3, "box4-gpu0"));
  EXPECT_FALSE(MayActAs(box3, "box"));
  EXPECT_FALSE(MayActAs(box3, ""));
  EXPECT_TRUE(MayActAs(Principal{"root", Role::kAdmin}, "box4-gpu0"));
  EXPECT_FALSE(MayActAs(Principal{"alice", Role::kUser}, "alice"));
}

TEST(TokenTableTest, EmptyTableLetsEveryoneInAsAdmin) {
  TokenTable table;
  CART_ASSERT_OK_AND_ASSIGN(Principal who, table.Check(std::nullopt, Api::kWorker, "m"));
  EXPECT_EQ(who.role, Role::kAdmin);
}

class AuthTest : public ServerFixture {
 protected:
  void Configure(ServerConfig& config) override {
    const std::string path = dir_.File("tokens");
    WriteFile(path, StrCat(kWorkerToken, " worker box3\n", kUserToken, " user alice\n", kAdminToken,
                           " admin root\n", kOtherWorkerToken, " worker box4\n"));
    config.tokens_file = path;
  }

  grpc::StatusCode ListSweeps(const std::string& token) {
    grpc::ClientContext context;
    Prepare(context, token);
    v1::ListSweepsResponse response;
    return scheduler_->ListSweeps(&context, v1::ListSweepsRequest{}, &response).error_code();
  }

  grpc::StatusCode Register(const std::string& token, const std::string& id = "box3-gpu0") {
    FakeWorker worker(Channel(), id, 8192, token);
    return worker.Register().error_code();
  }
};

TEST_F(AuthTest, CallsWithoutATokenAreUnauthenticated) {
  EXPECT_EQ(ListSweeps(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Register(""), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AuthTest, UnknownTokensAreUnauthenticated) {
  EXPECT_EQ(ListSweeps("not-a-token-of-this-server"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Register("not-a-token-of-this-server"), grpc::StatusCode::UNAUTHENTICATED);
  // Not "Bearer <token>".
  grpc::ClientContext context;
  context.AddMetadata("authorization", StrCat("Basic ", kUserToken));
  v1::ListSweepsResponse response;
  EXPECT_EQ(scheduler_->ListSweeps(&context, v1::ListSweepsRequest{}, &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AuthTest, WorkerTokenCannotCallTheResearcherApi) {
  grpc::ClientContext context;
  Prepare(context, kWorkerToken);
  v1::SubmitSweepRequest request;
  request.set_spec_yaml(TinySweep("s"));
  v1::SubmitSweepResponse response;
  grpc::Status status = scheduler_->SubmitSweep(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("'box3' has role worker"));
  EXPECT_EQ(ListSweeps(kWorkerToken), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AuthTest, UserTokenCannotCallTheWorkerApi) {
  EXPECT_EQ(Register(kUserToken), grpc::StatusCode::PERMISSION_DENIED);
  FakeWorker worker(Channel(), "w1", 8192, kUserToken);
  std::string data;
  EXPECT_EQ(worker.Get(std::string(64, 'a'), &data).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AuthTest, RightRolesAreServedAndAdminMayCallBoth) {
  EXPECT_EQ(ListSweeps(kUserToken), grpc::StatusCode::OK);
  EXPECT_EQ(Register(kWorkerToken), grpc::StatusCode::OK);
  EXPECT_EQ(ListSweeps(kAdminToken), grpc::StatusCode::OK);
  EXPECT_EQ(Register(kAdminToken), grpc::StatusCode::OK);
}

TEST_F(AuthTest, WorkerTokensAreBoundToTheirWorkerIds) {
  EXPECT_EQ(Register(kWorkerToken, "box3"), grpc::StatusCode::OK);
  EXPECT_EQ(Register(kWorkerToken, "box3.1"), grpc::StatusCode::OK);
  EXPECT_EQ(Register(kWorkerToken, "box4-gpu0"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Register(kWorkerToken, "box30"), grpc::StatusCode::PERMISSION_DENIED);

  // Registering as another box's worker names the token and the id.
  FakeWorker impostor(Channel(), "box4-gpu0", 8192, kWorkerToken);
  grpc::Status status = impostor.Register();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("token 'box3'"));
  EXPECT_THAT(status.error_message(), HasSubstr("not as 'box4-gpu0'"));

  // Nor can it take jobs under that id once box4 has registered it.
  FakeWorker box4(Channel(), "box4-gpu0", 8192, kOtherWorkerToken);
  ASSERT_TRUE(box4.Register().ok());
  std::optional<v1::Job> job;
  EXPECT_EQ(impostor.Acquire(0, &job).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AuthTest, OnlyTheLeasingWorkersTokenMayReportOnARun) {
  user_token_ = kUserToken;
  const std::vector<int64_t> ids = Submit(TinySweep("bound"));
  ASSERT_EQ(ids.size(), 1u);
  FakeWorker box4(Channel(), "box4-gpu0", 24 * 1024, kOtherWorkerToken);
  ASSERT_TRUE(box4.Register().ok());
  std::optional<v1::Job> job;
  ASSERT_TRUE(box4.Acquire(1000, &job).ok());
  ASSERT_TRUE(job.has_value());

  // box3's token opens a stream on box4's attempt: refused before anything is written.
  FakeWorker box3(Channel(), "box3-gpu0", 24 * 1024, kWorkerToken);
  auto stolen = box3.Open(job->run_id(), job->attempt());
  stolen->Metrics({{1, 9.0}});
  grpc::Status status = stolen->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("not as 'box4-gpu0'"));
  CART_ASSERT_OK_AND_ASSIGN(auto summaries, server_->store().RunSummaries(job->run_id()));
  EXPECT_TRUE(summaries.empty());
  // Nor on the attempt that comes next, before it exists.
  auto early = box3.Open(job->run_id(), job->attempt() + 1);
  early->Metrics({{1, 9.0}});
  status = early->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("has no attempt"));

  // The leasing worker's own token is served, and so is an admin's.
  auto own = box4.Open(job->run_id(), job->attempt());
  ASSERT_TRUE(own->Metrics({{1, 2.5}}));
  v1::SchedulerControl ack;
  ASSERT_TRUE(own->Read(&ack));
  EXPECT_EQ(ack.ack().acked_step(), 1);
  own->Cancel();
  FakeWorker admin(Channel(), "box4-gpu0", 24 * 1024, kAdminToken);
  auto as_admin = admin.Open(job->run_id(), job->attempt());
  ASSERT_TRUE(as_admin->Metrics({{2, 2.4}}));
  ASSERT_TRUE(as_admin->Read(&ack));
  EXPECT_EQ(ack.ack().acked_step(), 2);
  as_admin->Cancel();
}

TEST_F(AuthTest, AuditTrailNamesTheTokenHolder) {
  user_token_ = kUserToken;
  const std::vector<int64_t> ids = Submit(TinySweep("audited"));
  ASSERT_EQ(ids.size(), 1u);
  CART_ASSERT_OK_AND_ASSIGN(auto events, server_->store().RunEvents(ids[0]));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].who, "user:alice");
}

// ---- TLS

int Run(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

// A CA and a server certificate for 127.0.0.1 / localhost signed by it, made with the openssl CLI.
struct TestPki {
  explicit TestPki(const TempDir& dir) {
    const std::string d = dir.path().string();
    ca_pem = d + "/ca.pem";
    cert_pem = d + "/server.pem";
    key_pem = d + "/server.key";
    other_ca_pem = d + "/other-ca.pem";
    WriteFile(d + "/ext.cnf",
              "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n");
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    ok = Run(StrCat("openssl req -x509 ", ec, " -keyout ", d, "/ca.key -out ", ca_pem,
                    " -days 1 -subj /CN=cart-test-ca")) == 0 &&
         Run(StrCat("openssl req ", ec, " -keyout ", key_pem, " -out ", d,
                    "/server.csr -subj /CN=localhost")) == 0 &&
         Run(StrCat("openssl x509 -req -in ", d, "/server.csr -CA ", ca_pem, " -CAkey ", d,
                    "/ca.key -CAcreateserial -out ", cert_pem, " -days 1 -extfile ", d,
                    "/ext.cnf")) == 0 &&
         Run(StrCat("openssl req -x509 ", ec, " -keyout ", d, "/other-ca.key -out ", other_ca_pem,
                    " -days 1 -subj /CN=someone-else")) == 0;
  }
  bool ok = false;
  std::string ca_pem, cert_pem, key_pem, other_ca_pem;
};

class TlsTest : public ServerFixture {
 protected:
  void Configure(ServerConfig& config) override {
    pki_ = std::make_unique<TestPki>(pki_dir_);
    ASSERT_TRUE(pki_->ok) << "openssl could not make the test certificates";
    config.tls_cert_file = pki_->cert_pem;
    config.tls_key_file = pki_->key_pem;
  }

  grpc::StatusCode ListSweepsOver(std::shared_ptr<grpc::ChannelCredentials> credentials) {
    auto channel = grpc::CreateChannel(server_->dial_address(), credentials);
    auto stub = v1::SchedulerService::NewStub(channel);
    grpc::ClientContext context;
    Prepare(context, "", 5);
    v1::ListSweepsResponse response;
    return stub->ListSweeps(&context, v1::ListSweepsRequest{}, &response).error_code();
  }

  TempDir pki_dir_;
  std::unique_ptr<TestPki> pki_;
};

TEST_F(TlsTest, ClientTrustingTheTestCaCompletesTheHandshake) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ReadFile(pki_->ca_pem);
  EXPECT_EQ(ListSweepsOver(grpc::SslCredentials(options)), grpc::StatusCode::OK);
}

TEST_F(TlsTest, ClientsWithoutTheCaOrWithoutTlsAreRefused) {
  grpc::SslCredentialsOptions other;
  other.pem_root_certs = ReadFile(pki_->other_ca_pem);
  EXPECT_EQ(ListSweepsOver(grpc::SslCredentials(other)), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ListSweepsOver(grpc::InsecureChannelCredentials()), grpc::StatusCode::UNAVAILABLE);
}

// The dashboard's HTTP port speaks TLS with the same certificate (docs/dashboard.md).
class HttpsTest : public TlsTest {
 protected:
  void Configure(ServerConfig& config) override {
    TlsTest::Configure(config);
    config.http_listen = "127.0.0.1:0";
  }
  // One request through `openssl s_client` trusting `ca`: what came back, handshake included.
  std::string Fetch(const std::string& ca) {
    return ::cart::testing::RunCommand(
               StrCat("printf 'GET /healthz HTTP/1.0\r\n\r\n' | openssl s_client -quiet "
                      "-verify_return_error -connect 127.0.0.1:",
                      server_->http_port(), " -CAfile ", ca, " 2>&1"))
        .output;
  }
};

TEST_F(HttpsTest, TheDashboardPortServesHttpsWithTheServersCertificate) {
  EXPECT_THAT(server_->dashboard_url(), ::testing::StartsWith("https://127.0.0.1:"));
  const std::string trusted = Fetch(pki_->ca_pem);
  EXPECT_THAT(trusted, ::testing::HasSubstr("HTTP/1.0 200"));
  EXPECT_THAT(trusted, ::testing::HasSubstr(R"({"ok":true,)"));
  const std::string untrusted = Fetch(pki_->other_ca_pem);
  EXPECT_THAT(untrusted, ::testing::Not(::testing::HasSubstr("HTTP/1.0 200")));
  EXPECT_THAT(untrusted, ::testing::HasSubstr("verify error"));
}

// ---- Where cartd may listen

// cartd warns about a tokens file that others may read, or a group other than its own: a file
// readable by cartd's own group (Kubernetes' fsGroup with mode 0440, root:cart 0640) is not.
TEST(TokensFileModeTest, WarnsWhenOthersOrAnotherGroupMayReadIt) {
  if (geteuid() != 0) GTEST_SKIP() << "giving the file another group needs root";
  struct Case {
    mode_t mode;
    gid_t group;
    bool warns;
  };
  const gid_t own = getegid(), other = getegid() + 1;
  for (const Case& c : {Case{0600, own, false}, Case{0440, own, false}, Case{0640, other, true},
                        Case{0604, own, true}}) {
    testing::TempDir dir;
    const std::string path = dir.File("tokens");
    WriteFile(path, StrCat(kUserToken, " user alice\n"));
    ASSERT_EQ(chmod(path.c_str(), c.mode), 0);
    ASSERT_EQ(chown(path.c_str(), static_cast<uid_t>(-1), c.group), 0);
    ServerConfig config;
    config.listen = "127.0.0.1:0";
    config.data_dir = dir.File("data");
    config.tokens_file = path;
    ::testing::internal::CaptureStderr();
    absl::StatusOr<std::unique_ptr<ServerHandle>> server = RunServer(config);
    const std::string said = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_EQ(said.find("can be read by other users") != std::string::npos, c.warns)
        << "mode " << std::oct << c.mode << " group " << std::dec << c.group << ": " << said;
  }
}

TEST(ListenTest, LoopbackIsRecognised) {
  EXPECT_TRUE(IsLoopbackListen("127.0.0.1:7070"));
  EXPECT_TRUE(IsLoopbackListen("localhost:0"));
  EXPECT_TRUE(IsLoopbackListen("[::1]:7070"));
  EXPECT_FALSE(IsLoopbackListen("0.0.0.0:7070"));
  EXPECT_FALSE(IsLoopbackListen("[::]:7070"));
  EXPECT_FALSE(IsLoopbackListen("10.1.2.3:7070"));
  EXPECT_FALSE(IsLoopbackListen(":7070"));
  // Trusted for the address, not for a prefix of the name.
  EXPECT_TRUE(IsLoopbackListen("127.8.9.10:7070"));
  EXPECT_FALSE(IsLoopbackListen("127.example.org:7070"));
  EXPECT_FALSE(IsLoopbackListen("127.0.0.1.example.org:7070"));
}

TEST(ListenTest, APublicDashboardAddressNeedsTlsAndTokensToo) {
  ServerConfig config;
  config.data_dir = "/tmp/unused";
  config.http_listen = "0.0.0.0:8080";
  absl::Status refused = ValidateServerConfig(config);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("0.0.0.0:8080"));
  config.http_listen = "nonsense";
  EXPECT_EQ(ValidateServerConfig(config).code(), absl::StatusCode::kInvalidArgument);
  config.http_listen = "127.0.0.1:8080";
  EXPECT_TRUE(ValidateServerConfig(config).ok());
}

TEST(ListenTest, NonLoopbackWithoutTlsAndTokensIsRefusedUnlessInsecure) {
  ServerConfig config;
  config.listen = "0.0.0.0:0";
  EXPECT_THAT(ValidateServerConfig(config),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("without TLS (--tls-cert, --tls-key) and tokens (--tokens)")));
  config.tokens_file = "tokens";
  EXPECT_THAT(ValidateServerConfig(config),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("without TLS")));
  config.tls_cert_file = "cert.pem";
  config.tls_key_file = "key.pem";
  CART_EXPECT_OK(ValidateServerConfig(config));

  ServerConfig insecure;
  insecure.listen = "0.0.0.0:0";
  insecure.insecure = true;
  CART_EXPECT_OK(ValidateServerConfig(insecure));
  // RunServer applies the same rule.
  TempDir dir;
  ServerConfig refused;
  refused.listen = "0.0.0.0:0";
  refused.data_dir = dir.File("data");
  EXPECT_THAT(RunServer(refused),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("0.0.0.0")));
  refused.insecure = true;
  auto server = RunServer(refused);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_GT((*server)->port(), 0);
}

TEST(ListenTest, BadConfigsAreNamed) {
  ServerConfig config;
  config.listen = "nonsense";
  EXPECT_THAT(ValidateServerConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not host:port")));
  config.listen = "127.0.0.1:0";
  config.tls_cert_file = "cert.pem";
  EXPECT_THAT(ValidateServerConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("both")));
}

TEST(ConfigFileTest, KeysApplyAndUnknownKeysAreNamedWithTheLine) {
  ServerConfig config;
  CART_ASSERT_OK(
      ApplyConfigYaml("listen: 0.0.0.0:7443\nlease_ttl: 30\ninsecure: true\n"
                      "data_dir: /srv/cart\n",
                      "cartd.yaml", config));
  EXPECT_EQ(config.listen, "0.0.0.0:7443");
  EXPECT_EQ(config.lease_ttl, absl::Seconds(30));
  EXPECT_TRUE(config.insecure);
  EXPECT_EQ(config.data_dir, "/srv/cart");
  CART_ASSERT_OK(
      ApplyConfigYaml("http_listen: 0.0.0.0:8443\nweb_dir: /srv/web\n", "c.yaml", config));
  EXPECT_EQ(config.http_listen, "0.0.0.0:8443");
  EXPECT_EQ(config.web_dir, "/srv/web");
  CART_ASSERT_OK(ApplyConfigYaml("http_listen: off\n", "c.yaml", config));
  EXPECT_EQ(config.http_listen, "");
  CART_ASSERT_OK(ApplyConfigYaml("max_log_lines_per_attempt: 500\n", "c.yaml", config));
  EXPECT_EQ(config.max_log_lines_per_attempt, 500);
  EXPECT_THAT(ApplyConfigYaml("max_log_lines_per_attempt: 0\n", "c.yaml", config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_log_lines_per_attempt")));
  EXPECT_THAT(ApplyConfigYaml("listen: a:1\nlease_tll: 30\n", "cartd.yaml", config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cartd.yaml:2: lease_tll")));
  EXPECT_THAT(ApplyConfigYaml("lease_ttl: soon\n", "cartd.yaml", config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an integer")));
}

// The help and the docs show the same table: `cartd --help` prints every key with its default as
// ServerConfig holds it, and docs/architecture.md's "cartd config" table has a row for each key
// and no other.
TEST(ConfigFileTest, TheHelpAndTheDocsListEveryKeyOfTheTable) {
  ServerConfig defaults;
  const std::string help = ConfigKeysHelp(defaults);
  EXPECT_THAT(help,
              HasSubstr("  lease_ttl: seconds a lease lasts without a heartbeat (default: 60)\n"));
  EXPECT_THAT(help, HasSubstr("(default: earliest_finish)"));
  EXPECT_THAT(help, HasSubstr("  fair_share_half_life: hours;"));
  defaults.lease_ttl = absl::Seconds(90);
  EXPECT_THAT(ConfigKeysHelp(defaults), HasSubstr("(default: 90)"));

  absl::StatusOr<std::string> doc = ReadWholeFile(StrCat(CART_SOURCE_DIR, "/docs/architecture.md"));
  ASSERT_TRUE(doc.ok()) << doc.status();
  const size_t section = doc->find("\n## cartd config\n");
  ASSERT_NE(section, std::string::npos);
  const size_t end = doc->find("\n## ", section + 1);
  std::set<std::string> documented;
  for (const std::string& line : Split(doc->substr(section, end - section), '\n')) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::string first_cell = line.substr(2, line.find(" |", 2) - 2);
    for (const std::string& part : Split(first_cell, ',')) {
      const std::string name(Trim(part));
      documented.insert(name.substr(1, name.size() - 2));  // without the backquotes
    }
  }
  std::set<std::string> table;
  for (std::string_view key : ConfigKeys()) {
    table.insert(std::string(key));
    EXPECT_THAT("\n" + help, HasSubstr(StrCat("\n  ", key, ": "))) << "not in the help";
  }
  EXPECT_EQ(documented, table) << "docs/architecture.md's cartd config table differs from the keys";
}

// The key table is the parser's: every key it lists is parsed (a valid value applies, an invalid
// one is refused naming the key), and the unknown-key message lists the table.
TEST(ConfigFileTest, EveryKeyOfTheTableIsParsed) {
  for (std::string_view key : ConfigKeys()) {
    ServerConfig config;
    const std::string value =
        key == "insecure" ? "false"
                          : (key.find("listen") != std::string_view::npos ? "127.0.0.1:1" : "7");
    const absl::Status applied = ApplyConfigYaml(StrCat(key, ": ", value, "\n"), "c.yaml", config);
    EXPECT_NE(applied.code(), absl::StatusCode::kInternal) << key << ": " << applied;
    EXPECT_TRUE(applied.ok() || absl::IsInvalidArgument(applied)) << key << ": " << applied;
    const absl::Status listed = ApplyConfigYaml("no_such_key: 1\n", "c.yaml", config);
    EXPECT_THAT(listed, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(std::string(key))));
  }
  ServerConfig config;
  CART_ASSERT_OK(
      ApplyConfigYaml("max_big_reads: 3\nmax_big_reads_per_caller: 2\nhttp_idle_timeout: 5\n"
                      "http_max_connections_per_client: 9\n",
                      "c.yaml", config));
  EXPECT_EQ(config.max_big_reads, 3);
  EXPECT_EQ(config.max_big_reads_per_caller, 2);
  EXPECT_EQ(config.http_idle_timeout, absl::Seconds(5));
  EXPECT_EQ(config.http_max_connections_per_client, 9);
}

TEST(ConfigFileTest, UserBudgetsAreDeviceHoursAboveZeroByName) {
  ServerConfig config;
  CART_ASSERT_OK(ApplyConfigYaml(
      "user_budget_device_hours: 100\nuser_budgets: {ann: 250.5, bob: 10}\n", "c.yaml", config));
  EXPECT_EQ(config.user_budget_device_hours, 100);
  EXPECT_EQ(config.user_budgets, (std::map<std::string, double>{{"ann", 250.5}, {"bob", 10}}));
  EXPECT_THAT(
      ApplyConfigYaml("user_budgets:\n  ann: 5\n  bob: lots\n", "c.yaml", config),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("c.yaml:3: user_budgets.bob: must be a number of device-hours > 0")));
  EXPECT_THAT(ApplyConfigYaml("user_budgets: 5\n", "c.yaml", config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be a mapping")));
  EXPECT_THAT(ApplyConfigYaml("user_budget_device_hours: -1\n", "c.yaml", config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a number >= 0")));
}

TEST(ConfigFileTest, TheArtifactStoreIsCartdsOwnOrASharedFilesystem) {
  ServerConfig config;
  CART_ASSERT_OK(ApplyConfigYaml("artifact_store: {kind: shared_fs, path: /mnt/lab/cart}\n",
                                 "c.yaml", config));
  EXPECT_EQ(config.shared_artifact_path, "/mnt/lab/cart");
  CART_ASSERT_OK(ApplyConfigYaml("artifact_store:\n  kind: cartd\n", "c.yaml", config));
  EXPECT_EQ(config.shared_artifact_path, "");
  EXPECT_THAT(
      ApplyConfigYaml("artifact_store: {kind: nfs, path: /x}\n", "c.yaml", config),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("c.yaml:1: artifact_store.kind: 'nfs' is not cartd or shared_fs")));
  EXPECT_THAT(ApplyConfigYaml("artifact_store: {kind: shared_fs}\n", "c.yaml", config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("artifact_store.path: '' is not an absolute path")));
  EXPECT_THAT(
      ApplyConfigYaml("artifact_store: {kind: shared_fs, path: lab/cart}\n", "c.yaml", config),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'lab/cart' is not an absolute")));
  EXPECT_THAT(ApplyConfigYaml("artifact_store:\n  kind: shared_fs\n  pth: /x\n", "c.yaml", config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("c.yaml:3: artifact_store.pth: unknown key (known: kind, path)")));
  EXPECT_THAT(
      ApplyConfigYaml("artifact_store: {kind: cartd, path: /x}\n", "c.yaml", config),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a path needs kind shared_fs")));
  EXPECT_THAT(ApplyConfigYaml("artifact_store: /mnt/lab\n", "c.yaml", config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be a mapping")));
  EXPECT_EQ(config.shared_artifact_path, "");  // nothing applied by a refused value
}

}  // namespace
}  // namespace cart::server::testing
