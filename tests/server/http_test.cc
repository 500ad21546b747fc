// cartd's HTTP port in-process (RunServer with http_listen 127.0.0.1:0), spoken to over real
// loopback sockets: authentication and roles, the guard on changes, the JSON API's answers and
// errors, the static files, /metrics and the live streams (docs/dashboard.md).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "common/strings.h"
#include "server/caller_slots.h"
#include "server/http/dashboard.h"
#include "server/http/http_server.h"
#include "server/scheduler.h"
#include "tests/server/server_fixture.h"
#include "tests/store/store_fixture.h"

namespace cart::server::testing {
namespace {

using ::cart::testing::WriteFile;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kUser[] = "user-token-http-0123456789";
constexpr char kWorker[] = "worker-token-http-0123456789";
constexpr char kBob[] = "user-token-bob-http-0123456789";

struct Reply {
  int status = 0;
  std::string head;
  std::string body;
  json Json() const { return json::parse(body, nullptr, false); }
};

// An answer as read from the socket: status line and headers, then the body.
Reply Parse(const std::string& raw) {
  Reply reply;
  const size_t split = raw.find("\r\n\r\n");
  if (split == std::string::npos || split < 12) return reply;
  reply.head = raw.substr(0, split);
  reply.body = raw.substr(split + 4);
  reply.status = static_cast<int>(ParseInt64(reply.head.substr(9, 3)).value_or(0));
  return reply;
}

// A TCP connection to 127.0.0.1:port from `from` (another loopback address is another client);
// -1 when it cannot connect.
int Connect(int port, const char* from = "127.0.0.1") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, from, &local.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
    close(fd);
    return -1;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// One HTTP/1.1 request with "Connection: close"; reads until the server closes or, for streams,
// until `until` appears in the body (then the socket is dropped, as a closed browser tab would).
Reply Http(int port, const std::string& method, const std::string& target,
           const std::vector<std::string>& headers = {}, const std::string& body = "",
           const std::string& until = "") {
  Reply reply;
  const int fd = Connect(port);
  if (fd < 0) return reply;
  std::string request = StrCat(method, " ", target, " HTTP/1.1\r\nHost: 127.0.0.1:", port,
                               "\r\nConnection: close\r\nContent-Length: ", body.size(), "\r\n");
  for (const std::string& h : headers) request += h + "\r\n";
  request += "\r\n" + body;
  EXPECT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string raw;
  char buffer[8192];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) break;
    raw.append(buffer, static_cast<size_t>(n));
    if (!until.empty() && raw.find(until, raw.find("\r\n\r\n")) != std::string::npos) break;
  }
  close(fd);
  return Parse(raw);
}

// Sends `request` as it is on a new connection and reads the answer until the server closes.
Reply Raw(int port, const std::string& request, const char* from = "127.0.0.1") {
  Reply reply;
  const int fd = Connect(port, from);
  if (fd < 0) return reply;
  if (write(fd, request.data(), request.size()) < 0) {
    close(fd);
    return reply;
  }
  std::string raw;
  char buffer[8192];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) {
    raw.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return Parse(raw);
}

std::string Bearer(const std::string& token) { return StrCat("Authorization: Bearer ", token); }

// Opens the live stream `target` with `token` and reads until its first event; returns the open
// socket (the stream goes on until it is closed), or -1 with what came instead in `got`.
int OpenLive(int port, const std::string& target, const std::string& token, std::string* got) {
  const int fd = Connect(port);
  if (fd < 0) return -1;
  const std::string request = StrCat("GET ", target, " HTTP/1.1\r\nHost: 127.0.0.1:", port,
                                     "\r\nConnection: close\r\n", Bearer(token), "\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return -1;
  }
  char buffer[8192];
  while (got->find("\n\n", got->find("\r\n\r\n") + 4) == std::string::npos ||
         got->find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) break;
    got->append(buffer, static_cast<size_t>(n));
  }
  if (got->rfind("HTTP/1.1 200", 0) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

class HttpTest : public ServerFixture {
 protected:
  void Configure(ServerConfig& config) override {
    WriteFile(dir_.File("tokens"),
              StrCat(kUser, " user alice\n", kWorker, " worker box\n", kBob, " user bob\n"));
    config.tokens_file = dir_.File("tokens");
    config.http_listen = "127.0.0.1:0";
    WriteFile(dir_.File("web/index.html"), "<!doctype html><title>CART Lab</title>");
    config.web_dir = dir_.File("web");
    config.http_hosts = {"cart.lab.example"};
    user_token_ = kUser;
    worker_token_ = kWorker;
  }
  int port() { return server_->http_port(); }
  Reply Get(const std::string& target, const std::string& token = kUser) {
    return Http(port(), "GET", target, {Bearer(token)});
  }
  Reply Post(const std::string& target, const std::string& body,
             const std::vector<std::string>& extra = {}, const std::string& token = kUser) {
    std::vector<std::string> headers = {Bearer(token), "Content-Type: application/json"};
    headers.insert(headers.end(), extra.begin(), extra.end());
    return Http(port(), "POST", target, headers, body);
  }

  // Submits `sweep`'s first run, starts it on worker "box-gpu0" and streams `losses` (step,
  // value) for it, acknowledged; the worker and its stream stay open for the test.
  int64_t RunningWithLoss(const std::string& sweep,
                          const std::vector<std::pair<int64_t, double>>& losses) {
    const int64_t run = Submit(sweep).at(0);
    running_worker_ = MakeWorker("box-gpu0");
    EXPECT_TRUE(running_worker_->Register().ok());
    std::optional<v1::Job> job;
    EXPECT_TRUE(running_worker_->Acquire(0, &job).ok());
    if (!job.has_value()) {
      ADD_FAILURE() << "no job for the worker";
      return run;
    }
    running_stream_ = running_worker_->Open(job->run_id(), job->attempt());
    EXPECT_TRUE(running_stream_->Metrics(losses));
    v1::SchedulerControl ack;
    EXPECT_TRUE(running_stream_->Read(&ack));
    return run;
  }

  void TearDown() override {  // the stream ends before the server does
    if (running_stream_ != nullptr) running_stream_->Cancel();
    running_stream_.reset();
    running_worker_.reset();
    ServerFixture::TearDown();
  }

  std::unique_ptr<FakeWorker> running_worker_;
  std::unique_ptr<FakeWorker::Stream> running_stream_;
};

// A sweep's owner (or an admin) deletes it over HTTP and gRPC; another user may not; afterwards
// it is gone from every view and its name is free.
TEST_F(HttpTest, ASweepIsDeletedByItsOwnerOnly) {
  const std::vector<int64_t> runs =
      Submit("name: d\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\nseeds: [1, 2, 3]\n");
  const Reply bob = Post("/api/v1/sweeps/d/delete", "{}", {}, kBob);
  EXPECT_EQ(bob.status, 403) << bob.body;
  EXPECT_THAT(bob.Json()["error"].get<std::string>(), HasSubstr("only its owner or an admin"));
  const Reply done = Post("/api/v1/sweeps/d/delete", "{}");
  ASSERT_EQ(done.status, 200) << done.body;
  EXPECT_EQ(done.Json()["runs_deleted"], 3);
  EXPECT_EQ(Get("/api/v1/sweeps/d").status, 404);
  EXPECT_EQ(Get(StrCat("/api/v1/runs/", runs[0])).status, 404);
  EXPECT_EQ(Get("/api/v1/sweeps").Json()["sweeps"].size(), 0u);
  EXPECT_EQ(Post("/api/v1/sweeps/d/delete", "{}").status, 404);

  Submit(TinySweep("d"));  // the name is free again
  v1::DeleteSweepRequest request;
  request.set_name("d");
  v1::DeleteSweepResponse response;
  {
    grpc::ClientContext context;
    Prepare(context, kBob);
    EXPECT_EQ(scheduler_->DeleteSweep(&context, request, &response).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  grpc::ClientContext context;
  Prepare(context, kUser);
  const grpc::Status status = scheduler_->DeleteSweep(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.runs_deleted(), 1);
}

// Tags and notes: set over HTTP (from the dashboard's origin) and gRPC by any user, each with
// who and when; shown on run, sweep and runs pages; the runs page and ListRuns filter by tag;
// bad bodies and tags are refused naming the fault.
TEST_F(HttpTest, TagsAndNotesAreSetByAnyUserShownEverywhereAndFilterRuns) {
  const std::vector<int64_t> runs =
      Submit("name: tagged\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\nseeds: [1, 2, 3]\n");
  const std::string origin = StrCat("Origin: http://127.0.0.1:", port());
  Reply tagged = Post(StrCat("/api/v1/runs/", runs[1], "/annotate"),
                      R"({"add_tags": ["leak", "rerun"], "note": "train/val overlap: rerun"})",
                      {origin}, kBob);
  ASSERT_EQ(tagged.status, 200) << tagged.body;
  json a = tagged.Json();
  ASSERT_EQ(a["tags"].size(), 2u);
  EXPECT_EQ(a["tags"][0]["name"], "leak");
  EXPECT_EQ(a["tags"][0]["who"], "user:bob");
  EXPECT_GT(a["tags"][0]["at_us"].get<int64_t>(), 0);
  EXPECT_EQ(a["note"]["text"], "train/val overlap: rerun");
  EXPECT_EQ(a["note"]["who"], "user:bob");
  const json run = Get(StrCat("/api/v1/runs/", runs[1])).Json();
  EXPECT_EQ(run["tags"], json({"leak", "rerun"}));
  EXPECT_EQ(run["has_note"], true);
  EXPECT_EQ(run["annotation"]["note"]["text"], "train/val overlap: rerun");
  // The runs page shows the tags and filters by them (a,b: runs with both).
  json page = Get("/api/v1/sweeps/tagged/runs?tag=leak").Json();
  EXPECT_EQ(page["total"], 1);
  EXPECT_EQ(page["runs"][0]["id"], runs[1]);
  EXPECT_EQ(page["runs"][0]["tags"], json({"leak", "rerun"}));
  EXPECT_EQ(Get("/api/v1/sweeps/tagged/runs?tag=leak,nothing").Json()["total"], 0);
  EXPECT_EQ(Get("/api/v1/sweeps/tagged/runs").Json()["runs"][0]["tags"], json::array());
  // A sweep's own tags and note.
  Reply sweep = Post("/api/v1/sweeps/tagged/annotate",
                     R"({"add_tags": ["stage1"], "note": "first stage"})", {origin});
  ASSERT_EQ(sweep.status, 200) << sweep.body;
  EXPECT_EQ(Get("/api/v1/sweeps/tagged").Json()["tags"], json({"stage1"}));
  EXPECT_EQ(Get("/api/v1/sweeps/tagged").Json()["annotation"]["note"]["who"], "user:alice");
  EXPECT_EQ(Get("/api/v1/sweeps").Json()["sweeps"][0]["tags"], json({"stage1"}));
  // Refusals name the fault; nothing changes.
  const std::string target = StrCat("/api/v1/runs/", runs[1], "/annotate");
  Reply bad = Post(target, R"({"add_tags": ["has space"]})", {origin});
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.Json()["error"].get<std::string>(), HasSubstr("tag 'has space'"));
  bad = Post(target, R"({"tags": ["x"]})", {origin});
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.Json()["error"].get<std::string>(),
              HasSubstr("allowed: add_tags, remove_tags, note"));
  EXPECT_EQ(Post(target, R"({"add_tags": "leak"})", {origin}).status, 400);
  EXPECT_EQ(Post(target, R"({})", {origin}).status, 400);
  EXPECT_EQ(Post(target, R"({"note": 5})", {origin}).status, 400);
  EXPECT_EQ(Post(target, R"({"add_tags": ["x"]})", {origin}, kWorker).status, 403);
  EXPECT_EQ(Post(target, R"({"add_tags": ["x"]})", {"Origin: https://evil.example"}).status, 403);
  EXPECT_EQ(Post("/api/v1/runs/987654/annotate", R"({"add_tags": ["x"]})", {origin}).status, 404);
  EXPECT_EQ(Get(StrCat("/api/v1/runs/", runs[1])).Json()["tags"], json({"leak", "rerun"}));

  // gRPC: the same store, removal, and ListRuns' tag filter.
  v1::AnnotateRequest request;
  request.set_run_id(runs[2]);
  request.add_add_tags("leak");
  v1::AnnotateResponse response;
  {
    grpc::ClientContext context;
    Prepare(context, kUser);
    const grpc::Status status = scheduler_->Annotate(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.tags_size(), 1);
    EXPECT_EQ(response.tags(0).who(), "user:alice");
  }
  v1::ListRunsRequest list;
  list.add_tags("leak");
  v1::ListRunsResponse listed;
  {
    grpc::ClientContext context;
    Prepare(context, kUser);
    ASSERT_TRUE(scheduler_->ListRuns(&context, list, &listed).ok());
    ASSERT_EQ(listed.runs_size(), 2);
    EXPECT_EQ(listed.runs(0).run_id(), runs[1]);
    EXPECT_EQ(listed.runs(0).note().text(), "train/val overlap: rerun");
    EXPECT_EQ(listed.runs(1).run_id(), runs[2]);
  }
  request.clear_add_tags();
  request.add_remove_tags("leak");
  request.set_sweep("tagged");  // both a run and a sweep: refused
  {
    grpc::ClientContext context;
    Prepare(context, kUser);
    EXPECT_EQ(scheduler_->Annotate(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  request.clear_sweep();
  {
    grpc::ClientContext context;
    Prepare(context, kUser);
    ASSERT_TRUE(scheduler_->Annotate(&context, request, &response).ok());
    EXPECT_EQ(response.tags_size(), 0);
  }

  // Alice removes Bob's tag and replaces his note: both are kept, with who did what, on the run
  // page's card (and the answer to the change) and in GetRun.
  Reply replaced = Post(StrCat("/api/v1/runs/", runs[1], "/annotate"),
                        R"({"remove_tags": ["leak"], "note": "not a leak after all"})", {origin});
  ASSERT_EQ(replaced.status, 200) << replaced.body;
  const json history = replaced.Json()["history"];
  ASSERT_EQ(history.size(), 5u) << history.dump();
  EXPECT_EQ(history[3]["kind"], "tag removed");
  EXPECT_EQ(history[3]["value"], "leak");
  EXPECT_EQ(history[3]["who"], "user:alice");
  EXPECT_EQ(history[3]["previous"], "user:bob");
  EXPECT_EQ(history[4]["kind"], "note");
  EXPECT_EQ(history[4]["value"], "not a leak after all");
  EXPECT_EQ(history[4]["previous"], "train/val overlap: rerun");
  EXPECT_EQ(Get(StrCat("/api/v1/runs/", runs[1])).Json()["annotation"]["history"], history);
  EXPECT_EQ(Get("/api/v1/sweeps/tagged").Json()["annotation"]["history"].size(), 2u);
  v1::GetRunRequest get;
  get.set_run_id(runs[1]);
  v1::GetRunResponse got;
  {
    grpc::ClientContext context;
    Prepare(context, kUser);
    ASSERT_TRUE(scheduler_->GetRun(&context, get, &got).ok());
    ASSERT_EQ(got.annotation_history_size(), 5);
    EXPECT_EQ(got.annotation_history(4).who(), "user:alice");
    EXPECT_EQ(got.annotation_history(4).previous(), "train/val overlap: rerun");
    EXPECT_EQ(got.annotation_history(0).who(), "user:bob");
  }
}

// Large reads (run pages, pivots, groups, series; ListRuns, GetSweep, QueryTable) share one bound
// per caller across HTTP and gRPC: past it the extra read gets 429 / RESOURCE_EXHAUSTED naming the
// limit, small reads still answer, and the slot comes back when a read ends.
class BigReadLimitTest : public HttpTest {
 protected:
  void Configure(ServerConfig& config) override {
    HttpTest::Configure(config);
    config.max_big_reads_per_caller = 1;
  }
};

TEST_F(BigReadLimitTest, ExtraLargeReadsAreRefusedAcrossBothPorts) {
  Submit(TinySweep("b"));
  absl::StatusOr<std::shared_ptr<void>> held = server_->big_reads()->Take("user:alice");
  ASSERT_TRUE(held.ok());
  const Reply refused = Get("/api/v1/sweeps/b/runs");
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_THAT(refused.Json()["error"].get<std::string>(),
              HasSubstr("large reads (run lists, sweeps, tables) in progress (limit 1 per caller"));
  EXPECT_EQ(Get("/api/v1/sweeps").status, 200);
  EXPECT_EQ(Get("/api/v1/sweeps/b/runs", kBob).status, 200)
      << "another user has slots of their own";
  v1::ListRunsRequest list;
  v1::ListRunsResponse listed;
  {
    grpc::ClientContext context;
    Prepare(context, kUser);
    EXPECT_EQ(scheduler_->ListRuns(&context, list, &listed).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    // A page of at most 100 runs is not a large read (`cart up` polls with such).
    v1::ListRunsRequest small;
    small.set_limit(16);
    grpc::ClientContext context;
    Prepare(context, kUser);
    EXPECT_TRUE(scheduler_->ListRuns(&context, small, &listed).ok());
  }
  held->reset();
  EXPECT_EQ(Get("/api/v1/sweeps/b/runs").status, 200);
  grpc::ClientContext context;
  Prepare(context, kUser);
  EXPECT_TRUE(scheduler_->ListRuns(&context, list, &listed).ok());
}

// No answer carries more than 1,000 runs or max_answer_bytes of them, whatever the limit asked
// ("0: every run" included); the total says how many there are, and paging by offset + runs
// received reads each run exactly once.
class AnswerBytesTest : public HttpTest {
 protected:
  void Configure(ServerConfig& config) override {
    HttpTest::Configure(config);
    config.max_answer_bytes = 2000;
  }
};

TEST_F(AnswerBytesTest, PagesAreCutAtTheByteBoundAndStillCoverEveryRun) {
  std::string seeds;
  for (int s = 1; s <= 40; ++s) seeds += StrCat(s == 1 ? "" : ", ", s);
  Submit(
      StrCat("name: p\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\nseeds: [", seeds, "]\n"));
  std::set<int64_t> seen;
  int64_t offset = 0;
  int pages = 0;
  while (true) {
    v1::ListRunsRequest list;
    list.set_sweep("p");
    list.set_offset(offset);  // limit 0: "every run"
    v1::ListRunsResponse page;
    grpc::ClientContext context;
    Prepare(context, kUser);
    ASSERT_TRUE(scheduler_->ListRuns(&context, list, &page).ok());
    EXPECT_EQ(page.total(), 40);
    ASSERT_GT(page.runs_size(), 0);
    EXPECT_LE(page.ByteSizeLong(), 2000u + 300u);  // the views, and the total's few bytes
    for (const v1::RunView& run : page.runs()) EXPECT_TRUE(seen.insert(run.run_id()).second);
    offset += page.runs_size();
    ++pages;
    if (offset >= page.total()) break;
  }
  EXPECT_EQ(seen.size(), 40u);
  EXPECT_GT(pages, 2);
  v1::GetSweepRequest get;
  get.set_name("p");
  v1::GetSweepResponse sweep;
  grpc::ClientContext context;
  Prepare(context, kUser);
  ASSERT_TRUE(scheduler_->GetSweep(&context, get, &sweep).ok());
  EXPECT_EQ(sweep.run_total(), 40);
  EXPECT_LT(sweep.runs_size(), 40);
  // The dashboard's pages: cut short, flagged, and complete when paged by what came.
  std::set<int64_t> http_seen;
  for (int64_t at = 0; at < 40;) {
    const Reply page = Get(StrCat("/api/v1/sweeps/p/runs?limit=5000&params=all&offset=", at));
    ASSERT_EQ(page.status, 200) << page.body;
    const json j = page.Json();
    ASSERT_FALSE(j["runs"].empty());
    EXPECT_EQ(j["truncated"], at + static_cast<int64_t>(j["runs"].size()) < 40);
    for (const json& run : j["runs"])
      EXPECT_TRUE(http_seen.insert(run["id"].get<int64_t>()).second);
    at += static_cast<int64_t>(j["runs"].size());
  }
  EXPECT_EQ(http_seen.size(), 40u);
}

TEST_F(HttpTest, NoAnswerCarriesMoreThanAThousandRuns) {
  std::string seeds;
  for (int s = 1; s <= 1001; ++s) seeds += StrCat(s == 1 ? "" : ", ", s);
  Submit(
      StrCat("name: k\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\nseeds: [", seeds, "]\n"));
  for (int32_t limit : {0, 5000}) {
    v1::ListRunsRequest list;
    list.set_limit(limit);
    v1::ListRunsResponse page;
    grpc::ClientContext context;
    Prepare(context, kUser);
    ASSERT_TRUE(scheduler_->ListRuns(&context, list, &page).ok());
    EXPECT_EQ(page.runs_size(), 1000) << "limit " << limit;
    EXPECT_EQ(page.total(), 1001);
  }
  v1::GetSweepRequest get;
  get.set_name("k");
  v1::GetSweepResponse sweep;
  grpc::ClientContext context;
  Prepare(context, kUser);
  ASSERT_TRUE(scheduler_->GetSweep(&context, get, &sweep).ok());
  EXPECT_EQ(sweep.runs_size(), 1000);
  EXPECT_EQ(sweep.run_total(), 1001);
}

TEST_F(HttpTest, ApiNeedsAUserTokenAndMetricsAnyValidOne) {
  EXPECT_EQ(Http(port(), "GET", "/api/v1/sweeps").status, 401);
  const Reply worker = Get("/api/v1/sweeps", kWorker);
  EXPECT_EQ(worker.status, 403);
  EXPECT_EQ(worker.Json()["code"], "PERMISSION_DENIED");
  EXPECT_EQ(Get("/api/v1/sweeps").status, 200);
  EXPECT_EQ(Http(port(), "GET", "/metrics").status, 401);
  EXPECT_EQ(Get("/metrics", kWorker).status, 200);
  // Pages and health carry no data and need no token.
  const Reply page = Http(port(), "GET", "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_THAT(page.body, HasSubstr("CART Lab"));
  EXPECT_THAT(page.head, HasSubstr("Content-Security-Policy"));
  EXPECT_EQ(Http(port(), "GET", "/healthz").status, 200);
  EXPECT_EQ(Http(port(), "GET", "/static/../tokens").status, 400);
  EXPECT_EQ(Http(port(), "GET", "/tokens").status, 404);
}

TEST_F(HttpTest, TheDataDirCartdCreatesIsItsOwnersOnly) {
  struct stat info {};
  ASSERT_EQ(stat(config_.data_dir.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
}

TEST_F(HttpTest, RunsPagesSortFilterAndSayWhatIsWrong) {
  Submit(
      "name: grid\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\n"
      "grid: {R: [4, 2, 8]}\nseeds: [1, 2]\n");
  Reply page = Get("/api/v1/sweeps/grid/runs?limit=4&sort=param:R&order=desc");
  ASSERT_EQ(page.status, 200) << page.body;
  json j = page.Json();
  EXPECT_EQ(j["total"], 6);
  ASSERT_EQ(j["runs"].size(), 4u);
  EXPECT_EQ(j["runs"][0]["params"]["R"], "8");
  EXPECT_EQ(j["runs"][3]["params"]["R"], "4");
  EXPECT_EQ(j["varying"], json({"R", "seed"}));
  EXPECT_EQ(j["runs"][0]["state"], "QUEUED");
  j = Get("/api/v1/sweeps/grid/runs?param.R=2").Json();
  EXPECT_EQ(j["total"], 2);
  const Reply sweep = Get("/api/v1/sweeps");
  EXPECT_EQ(sweep.Json()["sweeps"][0]["states"]["QUEUED"], 6);
  const Reply bad_limit = Get("/api/v1/sweeps/grid/runs?limit=0");
  EXPECT_EQ(bad_limit.status, 400);
  EXPECT_THAT(bad_limit.Json()["error"].get<std::string>(), HasSubstr("'limit'"));
  EXPECT_EQ(Get("/api/v1/sweeps/grid/runs?sort=colour").status, 400);
  EXPECT_EQ(Get("/api/v1/sweeps/nope/runs").status, 404);
  EXPECT_EQ(Get("/api/v1/runs/x").status, 400);
  const Reply unknown = Get("/api/v1/nothing");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_THAT(unknown.Json()["error"].get<std::string>(), HasSubstr("docs/dashboard.md"));
}

TEST_F(HttpTest, ChangesMustBeJsonFromTheSameOrigin) {
  const int64_t run = Submit(TinySweep("c")).at(0);
  const std::string target = StrCat("/api/v1/runs/", run, "/cancel");
  // A form post (what another site can send without a preflight) is refused.
  Reply form = Http(port(), "POST", target,
                    {Bearer(kUser), "Content-Type: application/x-www-form-urlencoded"}, "a=b");
  EXPECT_EQ(form.status, 403);
  Reply cross = Post(target, "{}", {"Origin: https://evil.example"});
  EXPECT_EQ(cross.status, 403);
  EXPECT_THAT(cross.Json()["error"].get<std::string>(), HasSubstr("cross-origin"));
  EXPECT_EQ(Http(port(), "POST", target, {"Content-Type: application/json"}, "{}").status, 401);
  EXPECT_EQ(GetRun(run).state(), v1::RUN_STATE_QUEUED);
  Reply ok =
      Post(target, R"({"reason": "from the test"})", {StrCat("Origin: http://127.0.0.1:", port())});
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.Json()["state"], "CANCELLED");
  EXPECT_EQ(GetRun(run).state(), v1::RUN_STATE_CANCELLED);
  // The audit trail names the token's user.
  const json details = Get(StrCat("/api/v1/runs/", run)).Json();
  EXPECT_EQ(details["events"].back()["who"], "user:alice");
  const Reply extend = Post(StrCat("/api/v1/runs/", run, "/extend"), R"({"total_steps": "x"})");
  EXPECT_EQ(extend.status, 400);
  EXPECT_EQ(Post(StrCat("/api/v1/runs/", run, "/extend"), R"({"total_steps": 99})").status, 409);
  const Reply warm =
      Post(StrCat("/api/v1/runs/", run, "/extend"), R"({"total_steps": 99, "schedule": "warm"})");
  EXPECT_EQ(warm.status, 400);
  EXPECT_THAT(warm.body, HasSubstr(R"(schedule must be \"stretch\" or \"hold\")"));
  const Reply set = Post(StrCat("/api/v1/runs/", run, "/resume"), R"({"set": "lr=1"})");
  EXPECT_EQ(set.status, 400);
  EXPECT_THAT(set.body, HasSubstr("list of at most 64"));
  EXPECT_EQ(Post(StrCat("/api/v1/runs/", run, "/cancel"), "not json").status, 400);
}

// DNS rebinding: a page at the attacker's name, whose name then resolves to 127.0.0.1, sends
// same-origin requests (Origin and Host both its name). Without the Host check it read every run
// and, with authentication off, cancelled them.
TEST_F(HttpTest, RequestsUnderAnotherSitesNameAreRefused) {
  const int64_t run = Submit(TinySweep("rebind")).at(0);
  auto request = [&](const std::string& method, const std::string& target, const std::string& host,
                     const std::string& extra = "") {
    return Raw(port(), StrCat(method, " ", target, " HTTP/1.1\r\nHost: ", host, "\r\n",
                              Bearer(kUser), "\r\nConnection: close\r\n", extra, "Content-Length: ",
                              method == "POST" ? 2 : 0, "\r\n\r\n", method == "POST" ? "{}" : ""));
  };
  const std::string evil = StrCat("evil.example:", port());
  const Reply read = request("GET", "/api/v1/sweeps", evil);
  EXPECT_EQ(read.status, 403);
  EXPECT_THAT(read.Json()["error"].get<std::string>(), HasSubstr("not a name of this cartd"));
  // ... without telling another site's page what this machine is called.
  char machine[256] = {0};
  ASSERT_EQ(gethostname(machine, sizeof(machine) - 1), 0);
  EXPECT_THAT(read.body, Not(HasSubstr(machine)));
  EXPECT_EQ(request("GET", "/", evil).status, 403);  // the pages too
  const Reply cancel =
      request("POST", StrCat("/api/v1/runs/", run, "/cancel"), evil,
              StrCat("Content-Type: application/json\r\nOrigin: http://", evil, "\r\n"));
  EXPECT_EQ(cancel.status, 403);
  EXPECT_EQ(GetRun(run).state(), v1::RUN_STATE_QUEUED);
  // The names of this server: addresses, localhost, and the configured http_hosts.
  for (const std::string& host :
       {StrCat("127.0.0.1:", port()), StrCat("localhost:", port()), StrCat("[::1]:", port()),
        StrCat("cart.lab.example:", port()), StrCat("CART.lab.example.:", port())}) {
    EXPECT_EQ(request("GET", "/api/v1/sweeps", host).status, 200) << host;
  }
  // An Origin that is a name of ours but not the one the request went to is another site's.
  const Reply mixed =
      request("POST", StrCat("/api/v1/runs/", run, "/cancel"), StrCat("127.0.0.1:", port()),
              "Content-Type: application/json\r\nOrigin: http://localhost:1\r\n");
  EXPECT_EQ(mixed.status, 403);
  EXPECT_EQ(GetRun(run).state(), v1::RUN_STATE_QUEUED);
}

TEST(AllowedHostTest, AcceptsAddressesLoopbackNamesAndConfiguredNamesOnly) {
  const std::vector<std::string> names = {"cart.lab.example"};
  EXPECT_TRUE(http::AllowedHost("", names, "labbox3"));
  EXPECT_TRUE(http::AllowedHost("10.0.0.7:8080", names, "labbox3"));
  EXPECT_TRUE(http::AllowedHost("[fe80::1]:8080", names, "labbox3"));
  EXPECT_TRUE(http::AllowedHost("app.localhost:8080", names, "labbox3"));
  EXPECT_TRUE(http::AllowedHost("LabBox3:8080", names, "labbox3"));
  EXPECT_TRUE(http::AllowedHost("cart.lab.example", names, "labbox3"));
  EXPECT_FALSE(http::AllowedHost("evil.example:8080", names, "labbox3"));
  EXPECT_FALSE(http::AllowedHost("localhost.evil.example", names, "labbox3"));
  EXPECT_FALSE(http::AllowedHost("127.0.0.1.evil.example", names, "labbox3"));
  EXPECT_FALSE(http::AllowedHost("[not-an-address]:1", names, "labbox3"));
  EXPECT_FALSE(http::AllowedHost("labbox3.evil.example", names, "labbox3"));
}

// A thousand param.KEY filters made SQLite refuse the query and the answer a 500 carrying its SQL.
TEST_F(HttpTest, TooManyFiltersAreRefusedAndNoErrorShowsSql) {
  Submit(TinySweep("filters"));
  std::string target = "/api/v1/sweeps/filters/runs?";
  for (int i = 0; i < 100; ++i) target += StrCat("param.k", i, "=", i, "&");
  const Reply many = Get(target);
  EXPECT_EQ(many.status, 400) << many.body;
  EXPECT_THAT(many.Json()["error"].get<std::string>(), HasSubstr("at most 32 per request"));
  for (const Reply& r : {many, Get("/api/v1/sweeps/filters/runs?sort=param:d&param.d=64")}) {
    EXPECT_THAT(r.body, Not(HasSubstr("SELECT"))) << r.body;
  }
}

TEST_F(HttpTest, SmallerCarelessRequestsGetTheirProperAnswers) {
  // HEAD: a GET's headers, no body.
  const Reply head = Raw(port(), "HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(head.status, 200);
  EXPECT_THAT(head.head, HasSubstr("Content-Length: 38"));  // index.html's length
  EXPECT_EQ(head.body, "");
  // A folder is not a page.
  EXPECT_EQ(Get("/static/").status, 404);
  // total_steps past 2^63 - 1 is refused with the number as sent, not a wrapped one.
  const int64_t run = Submit(TinySweep("careless")).at(0);
  const Reply huge =
      Post(StrCat("/api/v1/runs/", run, "/extend"), R"({"total_steps": 9223372036854775808})");
  EXPECT_EQ(huge.status, 400);
  EXPECT_THAT(huge.body, HasSubstr("9223372036854775808 is past the largest step count"));
  EXPECT_THAT(huge.body, Not(HasSubstr("-9223372036854775808")));
  // A sweep's cancel reads its body like a run's: a JSON object with an optional reason.
  EXPECT_EQ(Post("/api/v1/sweeps/careless/cancel", "not json").status, 400);
  EXPECT_EQ(Post("/api/v1/sweeps/careless/cancel", R"({"reason": 5})").status, 400);
  EXPECT_EQ(GetRun(run).state(), v1::RUN_STATE_QUEUED);
  const Reply cancel = Post("/api/v1/sweeps/careless/cancel", R"({"reason": "typo in the grid"})");
  ASSERT_EQ(cancel.status, 200) << cancel.body;
  EXPECT_EQ(GetRun(run).state(), v1::RUN_STATE_CANCELLED);
  EXPECT_THAT(Get(StrCat("/api/v1/runs/", run)).body, HasSubstr("typo in the grid"));
}

// The groups view and `cart report` used opposite NaN rules (the view skipped a diverged seed's
// NaN, the report propagated it), so they drew different curves for one sweep. Both now use
// store::Summarize: a NaN run makes the group's mean NaN there (null in JSON).
TEST_F(HttpTest, GroupsMeanFollowsTheResultsRuleForADivergedSeed) {
  const std::vector<int64_t> runs =
      Submit("name: g\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 10}\nseeds: [1, 2]\n");
  ASSERT_EQ(runs.size(), 2u);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::unique_ptr<FakeWorker>> workers;
  std::vector<std::unique_ptr<FakeWorker::Stream>> streams;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(MakeWorker(StrCat("box-", i)));  // the worker token covers box-*
    FakeWorker* worker = workers.back().get();
    ASSERT_TRUE(worker->Register().ok());
    std::optional<v1::Job> job;
    ASSERT_TRUE(worker->Acquire(1000, &job).ok());
    ASSERT_TRUE(job.has_value());
    streams.push_back(worker->Open(job->run_id(), job->attempt()));
    // One seed learns (4, 3, 2, 1); the other (6, 5) diverges at step 3.
    ASSERT_TRUE(streams.back()->Metrics(
        i == 0 ? std::vector<std::pair<int64_t, double>>{{1, 4}, {2, 3}, {3, 2}, {4, 1}}
               : std::vector<std::pair<int64_t, double>>{{1, 6}, {2, 5}, {3, nan}, {4, nan}}));
  }
  for (int64_t run : runs) {
    ASSERT_TRUE(::cart::testing::WaitUntil([&] { return GetRun(run).step() == 4; }));
  }
  const Reply r = Get("/api/v1/sweeps/g/groups?by=d&metric=loss&points=4");
  ASSERT_EQ(r.status, 200) << r.body;
  const json group = r.Json()["groups"].at(0);
  ASSERT_EQ(group["mean"].size(), 4u) << r.body;
  EXPECT_DOUBLE_EQ(group["mean"][0].get<double>(), 5);
  EXPECT_DOUBLE_EQ(group["mean"][1].get<double>(), 4);
  // The band is the mean's 95 % interval: {4, 6} has s = √2, so mean ± t(0.975, 1) · √2 / √2
  // with t(0.975, 1) = 12.706204736174698 (SciPy).
  EXPECT_NEAR(group["ci_low"][0].get<double>(), 5 - 12.706204736174698, 1e-9);
  EXPECT_NEAR(group["ci_high"][0].get<double>(), 5 + 12.706204736174698, 1e-9);
  EXPECT_TRUE(group["mean"][2].is_null()) << "a diverged seed must not vanish from the mean";
  EXPECT_TRUE(group["mean"][3].is_null());
  EXPECT_TRUE(group["std"][3].is_null());
  EXPECT_TRUE(group["ci_low"][3].is_null());
  EXPECT_TRUE(group["ci_high"][3].is_null());
  EXPECT_EQ(group["n"][3], 2);
}

// A request line or headers past the limit got no answer at all (the connection just closed).
TEST_F(HttpTest, OversizedRequestLinesAndHeadersGet414And431) {
  const Reply long_url = Raw(port(), StrCat("GET /api/v1/sweeps?x=", std::string(20'000, 'a'),
                                            " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  EXPECT_EQ(long_url.status, 414) << long_url.head;
  EXPECT_EQ(long_url.Json()["code"], "URI_TOO_LONG");
  const Reply big_header =
      Raw(port(), StrCat("GET /api/v1/sweeps HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ",
                         std::string(20'000, 'b'), "\r\n\r\n"));
  EXPECT_EQ(big_header.status, 431) << big_header.head;
  EXPECT_EQ(big_header.Json()["code"], "HEADERS_TOO_LARGE");
}

// A chunked request's trailer, sent after the body, escaped every limit: a trailer field of 64 KiB
// or more made Beast throw std::length_error on the connection's thread, outside any handler, and
// cartd ended ("terminate called ... field value too large"). Now chunk lines and trailers are
// bounded and count against the header limit, and cartd answers the next client.
TEST_F(HttpTest, AChunkedRequestsTrailerCannotEndCartdAndCountsAgainstTheHeaderLimit) {
  const std::string head =
      StrCat("POST /api/v1/runs/1/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n",
             Bearer(kUser),
             "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n");
  const Reply huge =
      Raw(port(), StrCat(head, "0\r\nX-Big: ", std::string(70'000, 'a'), "\r\n\r\n"));
  EXPECT_EQ(huge.status, 431) << huge.head;
  EXPECT_EQ(huge.Json()["code"], "HEADERS_TOO_LARGE");
  EXPECT_THAT(huge.body, HasSubstr("trailer"));
  // Many small trailer fields, each well under the limit, together past it.
  std::string many;
  for (int i = 0; i < 20; ++i) many += StrCat("X-T", i, ": ", std::string(1000, 'b'), "\r\n");
  const Reply summed = Raw(port(), StrCat(head, "0\r\n", many, "\r\n"));
  EXPECT_EQ(summed.status, 431) << summed.head;
  EXPECT_THAT(summed.body, HasSubstr("trailer fields longer than 16384 bytes"));
  // A chunk line that never ends (a 70 KiB extension) is bounded the same way.
  const Reply extension =
      Raw(port(), StrCat("POST /api/v1/runs/1/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n2;x=",
                         std::string(70'000, 'e'), "\r\n{}\r\n0\r\n\r\n"));
  EXPECT_EQ(extension.status, 431) << extension.head;
  // cartd is still there, and a chunked request with a small trailer is served as any other.
  EXPECT_EQ(Get("/healthz").status, 200);
  const Reply small = Raw(port(), StrCat(head, "0\r\nX-Checksum: 1\r\n\r\n"));
  EXPECT_EQ(small.status, 404) << small.head << small.body;  // no run 1: routed, answered
}

// What the parser refused without an answer (the connection just closed) now gets a 400 that
// names the problem, and an HTTP/1.1 request names exactly one Host (RFC 9112 section 3.2). Each
// input is read in one piece and one byte at a time, with the same outcome.
TEST(ParseRequestTest, MalformedRequestsGetA400ThatNamesTheProblem) {
  const http::HttpServerOptions limits;
  struct Case {
    std::string bytes;
    int status;
    std::string says;
  };
  const std::string chunked = "POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::vector<Case> cases = {
      {chunked + "zz\r\n{}\r\n0\r\n\r\n", 400, "bad chunk"},
      {"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
       "2\r\n{}\r\n0\r\n\r\n",
       400, "Transfer-Encoding"},
      {"GET /a HTTP/1.1\r\nHost: h\r\nHost: evil.example\r\n\r\n", 400, "names 2"},
      {"GET /a HTTP/1.1\r\n\r\n", 400, "names 0"},
      {"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n{}", 400, "ended before"},
      {StrCat("GET /a HTTP/1.1\r\nHost: h\r\nX-Big: ", std::string(20'000, 'b'), "\r\n\r\n"), 431,
       "headers"},
      {StrCat("GET /a?", std::string(20'000, 'q'), " HTTP/1.1\r\nHost: h\r\n\r\n"), 414,
       "request line"},
      {StrCat(chunked, "0\r\nX-Big: ", std::string(70'000, 'a'), "\r\n\r\n"), 431, "trailer"},
  };
  for (const Case& c : cases) {
    for (size_t read_size : {size_t{65536}, size_t{1}}) {
      const http::Parsed parsed = http::ParseRequest(c.bytes, limits, read_size);
      EXPECT_FALSE(parsed.request.has_value()) << c.bytes.substr(0, 80);
      EXPECT_EQ(parsed.refusal.status, c.status) << c.bytes.substr(0, 80);
      EXPECT_THAT(parsed.refusal.body, HasSubstr(c.says)) << c.bytes.substr(0, 80);
    }
  }
  // A well-formed chunked request with a trailer reads whole, the trailer among its headers.
  const http::Parsed good =
      http::ParseRequest(chunked + "1\r\n{\r\n1\r\n}\r\n0\r\nX-Sum: 7\r\n\r\n", limits, 1);
  ASSERT_TRUE(good.request.has_value()) << good.refusal.body;
  EXPECT_EQ(good.request->body, "{}");
  EXPECT_EQ(good.request->Header("x-sum"), "7");
}

// An exception outside the handler (here Beast refusing to store a header field of 70 KiB that
// the handler's answer carries) ended the process; now it ends that connection with a 500, and
// the port serves the next request.
TEST(HttpServerLimitsTest, AnErrorOnAConnectionsThreadEndsOnlyThatConnection) {
  http::HttpServerOptions options;
  options.listen = "127.0.0.1:0";
  options.thread_nice = 0;
  auto server = http::HttpServer::Start(options, [](const http::Request& request) {
    http::Response r;
    r.body = R"({"ok":true})";
    if (request.path == "/huge") r.headers.emplace_back("X-Huge", std::string(70'000, 'h'));
    return r;
  });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string close = " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  const Reply huge = Raw((*server)->port(), StrCat("GET /huge", close));
  EXPECT_EQ(huge.status, 500) << huge.head;
  EXPECT_EQ(huge.Json()["code"], "INTERNAL");
  EXPECT_EQ(Raw((*server)->port(), StrCat("GET /fine", close)).status, 200);
}

// An HTTP server on a loopback port that answers every request {"ok":true}.
absl::StatusOr<std::unique_ptr<http::HttpServer>> StartOkServer(http::HttpServerOptions options) {
  options.listen = "127.0.0.1:0";
  options.thread_nice = 0;
  return http::HttpServer::Start(options, [](const http::Request&) {
    http::Response r;
    r.body = R"({"ok":true})";
    return r;
  });
}

// Like StartOkServer, and GET /live is a live stream whose events ("event: update", data 0, 1,
// 2, ...) come every `every`.
absl::StatusOr<std::unique_ptr<http::HttpServer>> StartStreamingServer(
    http::HttpServerOptions options, absl::Duration every) {
  options.listen = "127.0.0.1:0";
  options.thread_nice = 0;
  return http::HttpServer::Start(options, [every](const http::Request& request) {
    http::Response r;
    if (request.path == "/live") {
      r.content_type = "text/event-stream";
      r.stream = [every, n = 0]() mutable {
        http::StreamPoll poll;
        poll.chunk = StrCat("event: update\ndata: ", n++, "\n\n");
        poll.again = every;
        return poll;
      };
      return r;
    }
    r.body = R"({"ok":true})";
    return r;
  });
}

// Idle and trickling connections used to hold connection threads for ever (SO_RCVTIMEO never
// fired under Asio's blocking reads), and one client could take all of them. Now each request
// has a deadline the watchdog enforces, and one client address gets a bounded share.
TEST(HttpServerLimitsTest, IdleClientsAreCutAndOneClientCannotTakeEveryConnection) {
  http::HttpServerOptions options;
  options.max_connections = 16;
  options.max_connections_per_client = 4;
  options.idle_timeout = absl::Milliseconds(600);
  auto server = StartOkServer(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  // Four connections from 127.0.0.1 that send half a request line and then nothing.
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "GET /api/v1/swe", 15), 15);
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the server take them
  const std::string get = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  // A fifth from the same address is refused at once, with a reason.
  const Reply fifth = Raw(port, get);
  EXPECT_EQ(fifth.status, 429);
  EXPECT_THAT(fifth.body, HasSubstr("per client address"));
  // Another client (127.0.0.2 is loopback too) is served meanwhile.
  const Reply other = Raw(port, get, "127.0.0.2");
  EXPECT_EQ(other.status, 200) << "another client was locked out";
  // The idle connections are closed by the server within its deadline (plus the watchdog's tick).
  const auto start = std::chrono::steady_clock::now();
  for (int fd : idle) {
    char c;
    EXPECT_EQ(read(fd, &c, 1), 0) << "an idle connection was not closed";  // EOF, not a timeout
    close(fd);
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(waited, 5.0);
  // With them gone, the first client is served again.
  EXPECT_EQ(Raw(port, get).status, 200);
}

// The port is full of half-sent requests from several addresses (any local process can use any
// 127.x address, so a share per address alone cannot protect it): a newcomer is served at once,
// in place of the connection that has waited longest, which is closed. Only when every
// connection is being answered (live streams here) is a newcomer refused, with a 503.
TEST(HttpServerLimitsTest, AFullPortServesANewcomerInPlaceOfTheConnectionThatWaitedLongest) {
  http::HttpServerOptions options;
  options.max_connections = 16;
  options.max_connections_per_client = 16;
  auto server = StartStreamingServer(options, absl::Milliseconds(100));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const std::string get = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  // 16 half-sent requests from four addresses, the first opened first.
  std::vector<int> half_sent;
  for (int i = 0; i < 16; ++i) {
    const int fd = Connect(port, StrCat("127.0.0.", 2 + i % 4).c_str());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "GET /api/v1/swe", 15), 15);
    half_sent.push_back(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a clear order of waiting
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the server take them
  const Reply newcomer = Raw(port, get, "127.0.0.9");
  EXPECT_EQ(newcomer.status, 200) << newcomer.head << newcomer.body;
  // The connection that waited longest was closed for it (EOF, not the 20 s read timeout);
  // the one opened last is still there.
  char c;
  EXPECT_EQ(read(half_sent.front(), &c, 1), 0) << "the longest-waiting connection is still open";
  timeval short_wait{0, 200'000};
  setsockopt(half_sent.back(), SOL_SOCKET, SO_RCVTIMEO, &short_wait, sizeof(short_wait));
  EXPECT_EQ(read(half_sent.back(), &c, 1), -1) << "the newest connection was closed as well";
  for (int fd : half_sent) close(fd);

  // 16 live streams, each being answered: none waits for a request, so a newcomer gets 503.
  std::vector<int> streams;
  for (int i = 0; i < 16; ++i) {
    const int fd = Connect(port, StrCat("127.0.0.", 2 + i % 4).c_str());
    ASSERT_GE(fd, 0);
    const std::string live = "GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    ASSERT_EQ(write(fd, live.data(), live.size()), static_cast<ssize_t>(live.size()));
    char head[256];
    ASSERT_GT(read(fd, head, sizeof(head)), 0);  // its status line: it is being answered
    streams.push_back(fd);
  }
  const Reply refused = Raw(port, get, "127.0.0.9");
  EXPECT_EQ(refused.status, 503);
  EXPECT_THAT(refused.body, HasSubstr("being answered"));
  for (int fd : streams) close(fd);
  // Once the streams' clients are gone (seen at their next write), newcomers are served again.
  Reply again;
  for (int i = 0; i < 50 && again.status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    again = Raw(port, get, "127.0.0.9");
  }
  EXPECT_EQ(again.status, 200);
}

// A thousand idle connections and a hundred live streams from ten addresses cost the port no
// thread (it used to run one per connection), and a newcomer is served while they are held; the
// streams go on sending.
TEST(HttpServerLimitsTest, HeldConnectionsAndStreamsCostNoThreads) {
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = std::max<rlim_t>(files.rlim_cur, std::min<rlim_t>(files.rlim_max, 8192));
  setrlimit(RLIMIT_NOFILE, &files);
  if (files.rlim_cur < 3000) GTEST_SKIP() << "the open-file limit is " << files.rlim_cur;
  auto server = StartStreamingServer(http::HttpServerOptions{}, absl::Milliseconds(200));
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  auto threads = [] {
    int n = 0;
    for ([[maybe_unused]] const auto& task :
         std::filesystem::directory_iterator("/proc/self/task")) {
      ++n;
    }
    return n;
  };
  const int before = threads();
  std::vector<int> idle;
  for (int i = 0; i < 1000; ++i) {
    const int fd = Connect(port, StrCat("127.0.0.", 1 + i % 10).c_str());
    ASSERT_GE(fd, 0) << "connection " << i;
    ASSERT_EQ(write(fd, "GET /api/v1/swe", 15), 15);
    idle.push_back(fd);
  }
  std::vector<int> streams;
  const std::string live = "GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  for (int i = 0; i < 100; ++i) {
    const int fd = Connect(port, StrCat("127.0.0.", 1 + i % 10).c_str());
    ASSERT_GE(fd, 0) << "stream " << i;
    ASSERT_EQ(write(fd, live.data(), live.size()), static_cast<ssize_t>(live.size()));
    streams.push_back(fd);
  }
  // Every stream has its first event.
  int streaming = 0;
  for (int fd : streams) {
    std::string got;
    char buffer[4096];
    for (ssize_t n; got.find("event: update") == std::string::npos &&
                    (n = read(fd, buffer, sizeof(buffer))) > 0;) {
      got.append(buffer, static_cast<size_t>(n));
    }
    if (got.find("event: update") != std::string::npos) ++streaming;
  }
  EXPECT_EQ(streaming, 100);
  EXPECT_EQ(threads(), before) << "held connections took threads";
  const Reply newcomer =
      Raw(port, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", "127.0.0.11");
  EXPECT_EQ(newcomer.status, 200);
  // The streams go on: each sends a later event.
  int later = 0;
  for (int fd : streams) {
    std::string got;
    char buffer[4096];
    for (ssize_t n;
         got.find("data: 2") == std::string::npos && (n = read(fd, buffer, sizeof(buffer))) > 0;) {
      got.append(buffer, static_cast<size_t>(n));
    }
    if (got.find("data: 2") != std::string::npos) ++later;
  }
  EXPECT_EQ(later, 100);
  for (int fd : idle) close(fd);
  for (int fd : streams) close(fd);
}

// A connection kept open says how long the server waits for its next request, so that clients
// retire it before the watchdog cuts it (a busy client would otherwise send into a closing
// socket); the answer that closes the connection says nothing of the kind.
TEST(HttpServerLimitsTest, KeptConnectionsCarryTheIdleTimeoutAsAKeepAliveHint) {
  http::HttpServerOptions options;
  options.idle_timeout = absl::Seconds(7);
  auto server = StartOkServer(options);
  ASSERT_TRUE(server.ok()) << server.status();
  // Two requests on one connection: the first keeps it, the second closes it.
  const Reply both = Raw((*server)->port(),
                         "GET /a HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                         "GET /b HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(both.status, 200);
  EXPECT_THAT(both.head, HasSubstr("Keep-Alive: timeout=7"));
  const size_t second = both.body.find("HTTP/1.1 200");
  ASSERT_NE(second, std::string::npos) << "the second answer is missing: " << both.body;
  EXPECT_THAT(both.body.substr(second), Not(HasSubstr("Keep-Alive")));
  EXPECT_THAT(both.body.substr(second), HasSubstr("Connection: close"));
}

// A run's live stream that cannot read the store ends with an "error" event naming the problem;
// it used to skip what it could not read and send an update without it, so the page drew a curve
// with a hole, or a log with lines missing, and no sign of either.
TEST_F(HttpTest, ALiveStreamEndsWithTheStoresErrorInsteadOfSkippingIt) {
  const int64_t run = RunningWithLoss(TinySweep("broken"), {{1, 4.0}, {2, 3.5}});

  const std::string db = StrCat(config_.data_dir, "/cart.db");
  store::testing::ExecOnDatabaseFile(db, "ALTER TABLE run_logs RENAME TO run_logs_away");
  const Reply broken =
      Http(port(), "GET", StrCat("/api/v1/runs/", run, "/live"), {Bearer(kUser)}, "", "\n\n");
  EXPECT_EQ(broken.status, 200);
  EXPECT_THAT(broken.body, HasSubstr("event: error"));
  EXPECT_THAT(broken.body, HasSubstr("run_logs"));
  EXPECT_THAT(broken.body, Not(HasSubstr("event: update")));

  store::testing::ExecOnDatabaseFile(db, "ALTER TABLE run_logs_away RENAME TO run_logs");
  const Reply mended =
      Http(port(), "GET", StrCat("/api/v1/runs/", run, "/live"), {Bearer(kUser)}, "", "\n\n");
  EXPECT_THAT(mended.body, HasSubstr("event: update"));
  EXPECT_THAT(mended.body, HasSubstr(R"("loss")"));
}

TEST_F(HttpTest, MetricsLiveStreamsAndSeriesFollowARun) {
  const int64_t run = RunningWithLoss(TinySweep("live"), {{1, 4.0}, {2, 3.5}, {3, 9.0}, {4, 3.0}});

  // The series keeps the spike inside a bucket: max 9 in the bucket of steps 3..4.
  json series = Get(StrCat("/api/v1/runs/", run, "/series?metric=loss&points=2")).Json();
  EXPECT_EQ(series["step"], json({2, 4}));
  EXPECT_EQ(series["max"][1], 9.0);
  EXPECT_EQ(series["min"][1], 3.0);
  EXPECT_EQ(series["points"], 4);

  // A run's stream from step 2 on sends steps 3 and 4 only.
  const Reply live = Http(port(), "GET", StrCat("/api/v1/runs/", run, "/live?after=2"),
                          {Bearer(kUser)}, "", "\n\n");
  EXPECT_EQ(live.status, 200);
  EXPECT_THAT(live.head, HasSubstr("text/event-stream"));
  ASSERT_THAT(live.body, HasSubstr("event: update"));
  const json update = json::parse(live.body.substr(
      live.body.find("data: ") + 6, live.body.find("\n\n") - live.body.find("data: ") - 6));
  EXPECT_EQ(update["series"]["loss"]["step"], json({3, 4}));
  EXPECT_EQ(update["state"], "RUNNING");

  // A sweep's stream sends its running run with the whole series.
  const Reply sweep_live =
      Http(port(), "GET", "/api/v1/sweeps/live/live", {Bearer(kUser)}, "", "\n\n");
  ASSERT_THAT(sweep_live.body, HasSubstr("event: update"));
  EXPECT_THAT(sweep_live.body, HasSubstr(R"("name":"live/0")"));

  // /metrics has the running run's latest loss and the ingested points.
  const Reply metrics = Get("/metrics", kWorker);
  EXPECT_THAT(metrics.body, HasSubstr(R"(cart_runs{state="RUNNING"} 1)"));
  EXPECT_THAT(metrics.body, HasSubstr(R"(cart_run_loss{run="live/0",sweep="live"} 3)"));
  EXPECT_THAT(metrics.body, HasSubstr("cart_metric_points_ingested_total 4"));
  // The expected finish from the placement plan: on /metrics and the sweeps page.
  EXPECT_THAT(
      metrics.body,
      HasSubstr(R"(cart_run_expected_finish_timestamp_seconds{run="live/0",sweep="live"})"));
  EXPECT_THAT(metrics.body,
              HasSubstr(R"(cart_sweep_expected_finish_timestamp_seconds{sweep="live"})"));
  const json sweeps = Get("/api/v1/sweeps").Json();
  ASSERT_EQ(sweeps["sweeps"].size(), 1u);
  EXPECT_GT(sweeps["sweeps"][0]["expected_finish_us"].get<int64_t>(), 0);
  EXPECT_EQ(sweeps["sweeps"][0]["runs_estimated"], 1);
  EXPECT_THAT(metrics.body, HasSubstr("cart_jobs_handed_out_total 1"));
  EXPECT_THAT(metrics.body, Not(HasSubstr("NaN")));
}

// The device heartbeat end to end on the server side: a GPU worker's readings (the fields the
// fake NVML of tests/worker gives cart-worker) reach /metrics with bounded labels and the workers
// page with their history; idle time is counted only while a worker holds no run and runs wait;
// the UUID maps to the run the card holds; a bad reading is refused naming its field, and what
// was stored stays.
// A ReportDevice as cart-worker sends it: the readings and the device as at registration (a
// FakeWorker registers index 0; `index` says otherwise, as a restarted cartd would learn it).
grpc::Status ReportDevice(FakeWorker& w, const std::string& uuid,
                          const std::vector<v1::DeviceSample>& samples, int index = 0) {
  v1::DeviceReport request;
  request.set_worker_id(w.id());
  request.mutable_device()->set_kind("cuda");
  request.mutable_device()->set_name("Fake GPU");
  request.mutable_device()->set_index(index);
  request.mutable_device()->set_uuid(uuid);
  for (const auto& s : samples) *request.add_samples() = s;
  v1::DeviceReportResponse response;
  grpc::ClientContext context;
  Prepare(context, kWorker);
  return w.stub()->ReportDevice(&context, request, &response);
}

// A hot, throttling RTX 3090 as NVML describes it (the fake NVML's second card, heated).
v1::DeviceSample HotReading() {
  v1::DeviceSample hot;
  hot.set_wall_time_us(1'000);
  hot.set_utilization(0.87);
  hot.set_memory_used_mib(3 * 1024);
  hot.set_memory_total_mib(24 * 1024);
  hot.set_temperature_c(91);
  hot.set_power_w(342.25);
  hot.set_sm_clock_mhz(1695);
  hot.set_memory_clock_mhz(9751);
  hot.set_throttle_reasons(0x40 | 0x4);
  return hot;
}

class LiveLimitTest : public HttpTest {
 protected:
  void Configure(ServerConfig& config) override {
    HttpTest::Configure(config);
    config.max_follows_per_caller = 2;
  }
};

// One user token holds at most its share of live streams (max_follows_per_caller, counted with
// its gRPC follow streams), from whatever addresses: 5 x 64 streams of one token once held the
// dashboard. Past it 429 names the bound; another user is served; a closed stream gives its slot
// back.
TEST_F(LiveLimitTest, ATokensLiveStreamsAreBoundedWhateverItsAddresses) {
  const int64_t run = Submit(TinySweep("live")).at(0);
  const std::string target = StrCat("/api/v1/runs/", run, "/live");
  std::vector<int> open;
  for (int i = 0; i < 2; ++i) {
    std::string got;
    const int fd = OpenLive(port(), i == 0 ? target : "/api/v1/sweeps/live/live", kUser, &got);
    ASSERT_GE(fd, 0) << got;
    open.push_back(fd);
  }
  const Reply refused = Http(port(), "GET", target, {Bearer(kUser)});
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_THAT(refused.body, HasSubstr("follow streams"));
  std::string bob;
  const int other = OpenLive(port(), target, kBob, &bob);
  EXPECT_GE(other, 0) << bob;
  if (other >= 0) close(other);
  close(open.back());
  open.pop_back();
  ASSERT_TRUE(::cart::testing::WaitUntil([&] {
    std::string again;
    const int fd = OpenLive(port(), target, kUser, &again);
    if (fd < 0) return false;
    open.push_back(fd);
    return true;
  }));
  for (int fd : open) close(fd);
}

class WorkerIdLimitTest : public HttpTest {
 protected:
  void Configure(ServerConfig& config) override {
    HttpTest::Configure(config);
    config.max_workers_per_token = 3;
  }
};

// One worker token registers at most max_workers_per_token ids (2,000 ids of one token once made
// /api/v1/workers 87 MB); an id it registered before may always come back. And only the worker an
// attempt is leased to records its data: another id of the same token is refused, so it cannot
// record a false identity that would fail every later attempt.
TEST_F(WorkerIdLimitTest, ATokensWorkerIdsAreBoundedAndOnlyTheLeasedOneRecordsData) {
  std::vector<std::unique_ptr<FakeWorker>> workers;
  for (const char* id : {"box-gpu0", "box-gpu1", "box-gpu2"}) {
    workers.push_back(MakeWorker(id));
    ASSERT_TRUE(workers.back()->Register().ok()) << id;
  }
  auto fourth = MakeWorker("box-gpu3");
  const grpc::Status refused = fourth->Register();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("token 'box' has registered 3 worker ids already; at most "
                        "max_workers_per_token = 3"));
  EXPECT_TRUE(workers[0]->Register().ok()) << "an id registered before comes back";
  EXPECT_EQ(Get("/api/v1/workers").Json()["workers"].size(), 3u);

  Submit(TinySweep("lineage"));
  std::optional<v1::Job> job;
  ASSERT_TRUE(workers[0]->Acquire(0, &job).ok());
  ASSERT_TRUE(job.has_value());
  auto record = [&](const std::string& worker_id) {
    v1::RecordRunDataRequest request;
    request.set_run_id(job->run_id());
    request.set_attempt(job->attempt());
    request.set_worker_id(worker_id);
    v1::DataIdentity* file = request.add_files();
    file->set_role("train");
    file->set_path("/data/train.bin");
    file->set_sha256(std::string(64, 'a'));
    file->set_size_bytes(10);
    file->set_tokens(5);
    file->set_tokenizer("synth:100");
    grpc::ClientContext context;
    Prepare(context, kWorker);
    v1::RecordRunDataResponse response;
    return workers[0]->stub()->RecordRunData(&context, request, &response);
  };
  const grpc::Status other = record("box-gpu1");
  EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(other.error_message(), HasSubstr("worker 'box-gpu1' may not record data for run"));
  EXPECT_THAT(other.error_message(), HasSubstr("leased to 'box-gpu0'"));
  const grpc::Status own = record("box-gpu0");
  EXPECT_TRUE(own.ok()) << own.error_message();
}

// A worker whose disk is below its own floor (cart-worker --min-free-disk-mib) stays alive and
// is handed nothing while runs wait; it shows as disk_full in ListWorkers, the workers page and
// /metrics, and takes the run once it reports room.
TEST_F(HttpTest, AWorkerBelowItsDiskFloorIsHandedNothingAndShownAsDiskFull) {
  Submit(TinySweep("disk"));
  auto a = MakeWorker("box-gpu0");
  ASSERT_TRUE(a->Register().ok());
  a->SetDisk(3, 4);
  std::optional<v1::Job> job;
  ASSERT_TRUE(a->Acquire(300, &job).ok());
  EXPECT_FALSE(job.has_value()) << "a worker below its disk floor was handed a run";
  const json workers = Get("/api/v1/workers").Json()["workers"];
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0]["state"], "disk_full");
  EXPECT_EQ(workers[0]["free_disk_bytes"], 3 << 20);
  EXPECT_EQ(workers[0]["disk_floor_bytes"], 4 << 20);
  const std::string m = Get("/metrics", kWorker).body;
  EXPECT_THAT(m, HasSubstr(R"(cart_worker_disk_full{worker="box-gpu0"} 1)"));
  EXPECT_THAT(m, HasSubstr(R"(cart_worker_free_disk_bytes{worker="box-gpu0"} 3145728)"));
  EXPECT_THAT(m, HasSubstr(R"(cart_workers{state="disk_full"} 1)"));
  EXPECT_THAT(m, HasSubstr("cart_workers_alive 1"));
  // A bound on what it may say, named.
  a->SetDisk(-1, 4);
  const grpc::Status refused = a->Acquire(0, &job);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("free_disk_mib is -1; allowed 0 to"));
  // Room again: the run is handed out, and the worker is no longer disk_full.
  a->SetDisk(5, 4);
  ASSERT_TRUE(a->Acquire(0, &job).ok());
  EXPECT_TRUE(job.has_value());
  EXPECT_EQ(Get("/api/v1/workers").Json()["workers"][0]["state"], "busy");
  EXPECT_THAT(Get("/metrics", kWorker).body,
              HasSubstr(R"(cart_worker_disk_full{worker="box-gpu0"} 0)"));
}

TEST_F(HttpTest, DeviceReadingsIdleTimeAndTheCardsRunReachMetricsAndTheWorkersPage) {
  Submit(TinySweep("fleet"));
  auto a = MakeWorker("box-gpu0");
  auto b = MakeWorker("box-gpu1");
  ASSERT_TRUE(a->Register().ok());
  ASSERT_TRUE(b->Register().ok());
  auto report = [](FakeWorker& w, const std::string& uuid,
                   const std::vector<v1::DeviceSample>& samples) {
    return ReportDevice(w, uuid, samples, w.id() == "box-gpu1" ? 1 : 0);
  };
  const v1::DeviceSample hot = HotReading();
  v1::DeviceSample earlier = hot;
  earlier.set_wall_time_us(500);
  earlier.set_utilization(0.5);
  ASSERT_TRUE(report(*a, "GPU-abc", {earlier, hot}).ok());
  ASSERT_TRUE(report(*a, "GPU-abc", {hot}).ok());  // a resend: not stored twice
  v1::DeviceSample cool;
  cool.set_wall_time_us(1'000);
  cool.set_utilization(0);
  cool.set_memory_total_mib(24 * 1024);
  ASSERT_TRUE(report(*b, "GPU-def", {cool}).ok());

  v1::DeviceSample bad = hot;
  bad.set_wall_time_us(2'000);
  bad.set_utilization(1.5);
  const grpc::Status refused = report(*a, "GPU-abc", {hot, bad});
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("samples[1]: utilization must be between 0 and 1, got 1.5"));
  v1::DeviceSample ahead = hot;  // a worker clock far ahead would hide every later reading
  ahead.set_wall_time_us(absl::ToUnixMicros(clock_.Now() + absl::Hours(1)));
  const grpc::Status future = report(*a, "GPU-abc", {ahead});
  EXPECT_EQ(future.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(future.error_message(), HasSubstr("samples[0]: wall_time_us"));
  EXPECT_THAT(future.error_message(), HasSubstr("ahead of cartd's clock by more than 10 minutes"));
  v1::DeviceSample huge = hot;
  huge.set_wall_time_us(3'000);
  huge.set_memory_used_mib(int64_t{1} << 50);
  EXPECT_THAT(report(*a, "GPU-abc", {huge}).error_message(),
              HasSubstr("must be between 0 and 1099511627776, got 1125899906842624"));
  FakeWorker stranger(Channel(), "box-gpu9", 1024, kWorker);
  EXPECT_EQ(report(stranger, "", {cool}).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // Both workers hold no run while one waits: 3 s idle each. Then A takes the run: neither is
  // idle while queued any more (A holds it, and nothing waits for B).
  Scheduler& scheduler = server_->scheduler();
  ASSERT_TRUE(scheduler.AccountIdle().ok());
  clock_.Advance(absl::Seconds(3));
  ASSERT_TRUE(scheduler.AccountIdle().ok());
  std::optional<v1::Job> job;
  ASSERT_TRUE(a->Acquire(0, &job).ok());
  ASSERT_TRUE(job.has_value());
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(scheduler.AccountIdle().ok());

  const std::string m = Get("/metrics", kWorker).body;
  const std::string card = R"({device="0",name="Fake GPU",uuid="GPU-abc",worker="box-gpu0"})";
  EXPECT_THAT(m, HasSubstr("cart_device_utilization_ratio" + card + " 0.87"));
  EXPECT_THAT(m, HasSubstr("cart_device_memory_used_bytes" + card + " 3221225472"));
  EXPECT_THAT(m, HasSubstr("cart_device_temperature_celsius" + card + " 91"));
  EXPECT_THAT(m, HasSubstr("cart_device_power_watts" + card + " 342.25"));
  EXPECT_THAT(m, HasSubstr("cart_device_sm_clock_hertz" + card + " 1695000000"));
  EXPECT_THAT(
      m,
      HasSubstr(
          R"(cart_device_throttled{device="0",name="Fake GPU",reason="hw_thermal",uuid="GPU-abc",worker="box-gpu0"} 1)"));
  EXPECT_THAT(
      m,
      HasSubstr(
          R"(cart_device_throttled{device="0",name="Fake GPU",reason="sw_power_cap",uuid="GPU-abc",worker="box-gpu0"} 1)"));
  EXPECT_THAT(
      m,
      HasSubstr(
          R"(cart_device_throttled{device="0",name="Fake GPU",reason="hw_slowdown",uuid="GPU-abc",worker="box-gpu0"} 0)"));
  EXPECT_THAT(m, HasSubstr(StrCat(
                     R"(cart_device_run_info{device="0",name="Fake GPU",run="fleet/0",run_id=")",
                     job->run_id(), R"(",uuid="GPU-abc",worker="box-gpu0"} 1)")));
  EXPECT_THAT(m, HasSubstr(R"(cart_worker_idle_while_queued_seconds_total{worker="box-gpu0"} 3)"));
  EXPECT_THAT(m, HasSubstr(R"(cart_worker_idle_while_queued_seconds_total{worker="box-gpu1"} 3)"));
  EXPECT_THAT(m, HasSubstr(R"(cart_worker_idle_while_queued{worker="box-gpu1"} 0)"));
  // B's report named its card index 1 (FakeWorker registered 0): the series follow the report.
  EXPECT_THAT(
      m,
      HasSubstr(
          R"(cart_device_utilization_ratio{device="1",name="Fake GPU",uuid="GPU-def",worker="box-gpu1"} 0)"));
  EXPECT_THAT(m, HasSubstr(R"(cart_idle_while_queued_device_hours_total{kind="cuda"} 0.001666)"));
  EXPECT_THAT(m, HasSubstr(R"(cart_worker_up{worker="box-gpu0"} 1)"));
  EXPECT_THAT(m, HasSubstr("cart_artifact_disk_floor_bytes"));
  EXPECT_THAT(
      m, Not(HasSubstr(
             "cart_device_temperature_celsius{device=\"0\",name=\"Fake GPU\",uuid=\"GPU-def\"")));

  const json workers = Get("/api/v1/workers").Json()["workers"];
  ASSERT_EQ(workers.size(), 2u);
  const json& gpu0 = workers[0]["id"] == "box-gpu0" ? workers[0] : workers[1];
  EXPECT_EQ(gpu0["uuid"], "GPU-abc");
  EXPECT_EQ(gpu0["run_name"], "fleet/0");
  EXPECT_EQ(gpu0["latest"]["temperature_c"], 91.0);
  EXPECT_EQ(gpu0["latest"]["throttle_reasons"], 0x44);
  EXPECT_EQ(gpu0["device"]["utilization"], json({0.5, 0.87}));  // the history, oldest first
  EXPECT_NEAR(gpu0["idle_while_queued_hours"].get<double>(), 3.0 / 3600, 1e-9);

  // cart workers ls's source: the latest reading and the idle hours in the gRPC view.
  v1::ListWorkersResponse listed;
  grpc::ClientContext context;
  Prepare(context, kUser);
  ASSERT_TRUE(scheduler_->ListWorkers(&context, {}, &listed).ok());
  ASSERT_EQ(listed.workers_size(), 2);
  const v1::WorkerView& view =
      listed.workers(0).worker_id() == "box-gpu0" ? listed.workers(0) : listed.workers(1);
  EXPECT_EQ(view.latest().temperature_c(), 91);
  EXPECT_EQ(view.uuid(), "GPU-abc");
  EXPECT_NEAR(view.idle_while_queued_hours(), 3.0 / 3600, 1e-9);
}

// Every series the shipped alert rules (dashboards/prometheus/alerts.yml) and Grafana panels
// (dashboards/grafana/cart-lab.json) name is one cartd exports, once there is something to say: a
// GPU reading (temperature, power, throttling), a run whose loss went non-finite and whose
// validation loss fell below its entropy floor, and that FAILED. (tests/dashboard/alerts_test.js
// runs the rules in a real Prometheus and Alertmanager; prometheus_test.js the panels' queries.)
TEST_F(HttpTest, EveryAlertRuleAndGrafanaPanelNamesASeriesCartdExports) {
  Submit(TinySweep("trouble", /*max_attempts=*/1));
  auto worker = MakeWorker("box-gpu0");
  ASSERT_TRUE(worker->Register().ok());
  ASSERT_TRUE(ReportDevice(*worker, "GPU-abc", {HotReading()}).ok());
  std::optional<v1::Job> job;
  ASSERT_TRUE(worker->Acquire(0, &job).ok());
  ASSERT_TRUE(job.has_value());
  auto stream = worker->Open(job->run_id(), job->attempt());
  v1::WorkerReport report;
  for (const char* name :
       {"loss_nonfinite", "leak_suspected", "loss", "rho_max", "tokens_per_s", "mfu", "mfu_6n"}) {
    v1::MetricPoint* point = report.mutable_metrics()->add_points();
    point->set_step(3);
    point->set_name(name);
    point->set_value(1);
    point->set_wall_time_us(1'700'000'000'000'000);
  }
  ASSERT_TRUE(stream->Send(report));
  v1::SchedulerControl ack;
  ASSERT_TRUE(stream->Read(&ack));
  // Running: the two marks show at once.
  std::string m = Get("/metrics", kWorker).body;
  EXPECT_THAT(m, HasSubstr(R"(cart_run_loss_nonfinite{run="trouble/0",run_id=")"));
  const std::string while_running = m;
  // MFU by both conventions, each saying what it counts.
  EXPECT_THAT(m, HasSubstr(R"(cart_run_mfu{run="trouble/0")"));
  EXPECT_THAT(m, HasSubstr(R"(cart_run_mfu_6n{run="trouble/0")"));
  EXPECT_THAT(m, HasSubstr("# HELP cart_run_mfu_6n Latest model FLOPs utilisation of a running run "
                           "by the CART paper's count: 6 x effective parameters"));
  EXPECT_THAT(m, HasSubstr("attention in full T x T"));
  ASSERT_TRUE(stream->Finish(v1::JobResult::OUTCOME_FAILED).ok());
  ASSERT_EQ(GetRun(job->run_id()).state(), v1::RUN_STATE_FAILED);
  m = Get("/metrics", kWorker).body;
  EXPECT_THAT(m, HasSubstr(StrCat(R"(cart_run_failed_timestamp_seconds{run="trouble/0",run_id=")",
                                  job->run_id(), R"(",sweep="trouble"})")));

  const std::string rules = ::cart::testing::ReadFile(std::filesystem::path(CART_SOURCE_DIR) /
                                                      "dashboards/prometheus/alerts.yml");
  // The series names in the rules' expressions (`expr:` lines).
  std::set<std::string> names;
  std::istringstream lines(rules);
  for (std::string line; std::getline(lines, line);) {
    const size_t expr = line.find_first_not_of(' ');
    if (expr == std::string::npos || line.compare(expr, 5, "expr:") != 0) continue;
    for (size_t at = line.find("cart_"); at != std::string::npos; at = line.find("cart_", at)) {
      size_t end = at;
      while (end < line.size() &&
             (std::islower(static_cast<unsigned char>(line[end])) || line[end] == '_')) {
        ++end;
      }
      names.insert(line.substr(at, end - at));
      at = end;
    }
  }
  EXPECT_GE(names.size(), 10u) << "the expressions name these: " << ::testing::PrintToString(names);
  // Declared in the exposition while the run ran or after it failed.
  auto exported = [&](const std::string& name) {
    const std::string type = "\n# TYPE " + name + " ";
    return while_running.find(type) != std::string::npos || m.find(type) != std::string::npos;
  };
  for (const std::string& name : names) {
    EXPECT_TRUE(exported(name)) << name << " is named by an alert rule";
  }
  const json grafana = json::parse(::cart::testing::ReadFile(
      std::filesystem::path(CART_SOURCE_DIR) / "dashboards/grafana/cart-lab.json"));
  int queries = 0;
  for (const json& panel : grafana["panels"]) {
    for (const json& target : panel["targets"]) {
      const std::string expr = target["expr"];
      ++queries;
      for (size_t at = expr.find("cart_"); at != std::string::npos; at = expr.find("cart_", at)) {
        size_t end = at;
        while (end < expr.size() &&
               (std::islower(static_cast<unsigned char>(expr[end])) || expr[end] == '_')) {
          ++end;
        }
        std::string name = expr.substr(at, end - at);
        // A histogram's series carry suffixes; its family is the name without them.
        for (const char* suffix : {"_bucket", "_sum", "_count"}) {
          if (absl::EndsWith(name, suffix) && !exported(name)) {
            name.resize(name.size() - std::strlen(suffix));
          }
        }
        EXPECT_TRUE(exported(name))
            << name << " is named by Grafana panel '" << panel["title"].get<std::string>() << "'";
        at = end;
      }
    }
  }
  EXPECT_GE(queries, 16);
  for (const char* name :
       {"cart_device_temperature_celsius", "cart_device_throttled", "cart_run_leak_suspected",
        "cart_run_loss_nonfinite", "cart_run_failed_timestamp_seconds", "cart_worker_up"}) {
    EXPECT_TRUE(names.count(name)) << name << " should be watched by a rule";
  }
}

}  // namespace
}  // namespace cart::server::testing
