// Notifications end to end (docs/operations.md "Notifications"): real cartd and cart-worker
// processes, subscriptions made with the `cart notify` CLI, and a real receiver
// (tests/support/notify_receiver.py: an HTTP server for the webhook and the Slack-compatible hook,
// aiosmtpd for the mail). A run fails for real (its training data is missing on the worker); a
// worker is killed and its run is lost; the receiver is down and comes back; cartd is killed
// before it has read an event and again before it has delivered one; the SMTP server refuses.

#include <signal.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/strings.h"
#include "tests/integration/cluster.h"
#include "tests/support/notify_receiver.h"

namespace cart::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// A sweep of `runs` runs whose training data does not exist: each attempt fails on the worker.
std::string FailingSweep(Cluster& c, const std::string& name, int runs = 1) {
  std::string data = c.SynthData();
  const std::string missing = c.dir() + "/gone/synth.bin";
  std::filesystem::create_directories(c.dir() + "/gone");
  std::filesystem::copy_file(data, missing);
  std::filesystem::copy_file(data.substr(0, data.size() - 4) + ".val.bin",
                             c.dir() + "/gone/synth.val.bin");
  const std::string file = c.WriteFile(
      name + ".yaml", StrCat("name: ", name, "\nbase:\n", RunBase(missing, 20, 10), "seeds: [",
                             runs == 1 ? "1" : "1, 2", "]\nmax_attempts: 1\n"));
  c.Cart({"sweep", "submit", file});
  // Gone before any worker reads it.
  std::filesystem::remove_all(c.dir() + "/gone");
  return file;
}

// cartd's config: mail through the receiver's SMTP port, quick retries and scans.
std::string Config(int smtp_port, int scan_interval_ms = 100) {
  return StrCat("smtp_host: 127.0.0.1\nsmtp_port: ", smtp_port,
                "\nsmtp_from: cartd@lab.example\nnotify_retry_base_ms: 300\n"
                "notify_retry_max: 1\nnotify_scan_interval_ms: ",
                scan_interval_ms, "\npublic_url: http://cart.lab.example:8080/\n");
}

// The log of subscription `id` as `cart notify log --json` gives it.
json NotifyLog(Cluster& c, int64_t id) {
  json log = json::parse(c.Cart({"notify", "log", "--subscription", std::to_string(id), "--json"}));
  return log.value("notifications", json::array());
}

// A JSON value as text: a string as it is, anything else as JSON (so that an unexpected type is
// shown in the failure, not thrown).
std::string Text(const json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }
// An int64 field of a proto's JSON (written as a string), 0 when absent: proto3's JSON leaves
// zero fields out, and a const json's [] of an absent key is undefined (it read garbage under
// load before a notification's first try).
int64_t Count(const json& object, const char* key) {
  const json j = object.value(key, json(0));
  if (j.is_number()) return j.get<int64_t>();
  return j.is_string() ? std::stoll(j.get<std::string>()) : 0;
}

int64_t AddSubscription(Cluster& c, const std::vector<std::string>& args) {
  std::vector<std::string> full = {"notify", "add"};
  full.insert(full.end(), args.begin(), args.end());
  full.push_back("--json");
  const json sub = json::parse(c.Cart(full));
  return std::stoll(sub["id"].get<std::string>());
}

std::vector<json> OfKind(const std::vector<json>& records, const std::string& kind,
                         const std::string& path_prefix = "") {
  std::vector<json> out;
  for (const json& r : records) {
    if (r["kind"] != kind) continue;
    if (!path_prefix.empty() && r["path"].get<std::string>().rfind(path_prefix, 0) != 0) continue;
    out.push_back(r);
  }
  return out;
}

class NotifyEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kReceiverPython)) GTEST_SKIP() << "no " << kReceiverPython;
  }
  TempDir dir_;
};

TEST_F(NotifyEndToEndTest, ARunThatFailsReachesAWebhookASlackHookAndAMailboxOnceEach) {
  auto receiver = Receiver::Start(dir_, {"--http-port", "0", "--smtp-port", "0"});
  ASSERT_NE(receiver, nullptr);
  Cluster c;
  c.StartCartd(Config(receiver->smtp_port()));
  const std::string base = StrCat("http://127.0.0.1:", receiver->http_port());
  const std::string slack_file =
      c.WriteFile("slack-url", StrCat(base, "/slack/T000/B000/XSECRETX\n"));
  c.Cart({"sweep", "submit",
          c.WriteFile("other.yaml", StrCat("name: other\nbase:\n", RunBase(c.SynthData(), 5, 5),
                                           "seeds: [1]\n"))});
  FailingSweep(c, "fails");
  const int64_t hook = AddSubscription(c, {"--sweep", "fails", "--on", "failed,sweep_finished",
                                           "--webhook", base + "/hook/HOOKSECRET"});
  const int64_t slack = AddSubscription(c, {"--on", "failed", "--slack", "@" + slack_file});
  const int64_t mail = AddSubscription(c, {"--on", "failed", "--email", "ann@lab.example"});
  // The secrets are not shown back.
  const std::string listed = c.Cart({"notify", "ls"});
  EXPECT_THAT(listed, Not(HasSubstr("SECRET")));
  EXPECT_THAT(listed, HasSubstr(StrCat(base, "/…")));
  EXPECT_THAT(listed, HasSubstr("ann@lab.example"));

  c.StartWorker("w1");
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const std::vector<json> r = receiver->Records();
        return OfKind(r, "http", "/hook").size() >= 2 && OfKind(r, "http", "/slack").size() >= 1 &&
               OfKind(r, "smtp").size() >= 1;
      },
      std::chrono::seconds(120)))
      << c.Log("cartd.log");
  std::this_thread::sleep_for(std::chrono::seconds(1));  // a repeat would come within this
  const std::vector<json> records = receiver->Records();

  const std::vector<json> hooks = OfKind(records, "http", "/hook");
  ASSERT_EQ(hooks.size(), 2u);  // failed, then the sweep's end
  const json failed = json::parse(hooks[0]["body"].get<std::string>());
  EXPECT_EQ(failed["event"], "failed");
  EXPECT_EQ(failed["sweep"]["name"], "fails");
  EXPECT_EQ(failed["run"]["state"], "FAILED");
  EXPECT_THAT(failed["url"].get<std::string>(), HasSubstr("http://cart.lab.example:8080/#/run/"));
  EXPECT_THAT(failed["details"]["why"].get<std::string>(), HasSubstr("gone/synth"));
  EXPECT_THAT(hooks[0]["headers"]["Idempotency-Key"].get<std::string>(),
              HasSubstr(StrCat("cart-", hook, "-failed-run-")));
  EXPECT_EQ(json::parse(hooks[1]["body"].get<std::string>())["event"], "sweep_finished");

  const std::vector<json> slacks = OfKind(records, "http", "/slack");
  ASSERT_EQ(slacks.size(), 1u);  // "other" has not failed
  EXPECT_THAT(json::parse(slacks[0]["body"].get<std::string>())["text"].get<std::string>(),
              HasSubstr("failed"));

  const std::vector<json> mails = OfKind(records, "smtp");
  ASSERT_EQ(mails.size(), 1u);
  EXPECT_EQ(mails[0]["rcpt_tos"], json::array({"ann@lab.example"}));
  EXPECT_EQ(mails[0]["mail_from"], "cartd@lab.example");
  EXPECT_THAT(mails[0]["subject"].get<std::string>(), HasSubstr("[CART Lab] run fails/"));
  EXPECT_THAT(mails[0]["text"].get<std::string>(), HasSubstr("cart notify rm"));

  for (int64_t id : {hook, slack, mail}) {
    const json log = NotifyLog(c, id);
    ASSERT_FALSE(log.empty()) << id;
    for (const json& n : log) EXPECT_EQ(n["state"], "DELIVERED") << n.dump();
  }
  const std::string table = c.Cart({"notify", "log"});
  EXPECT_THAT(table, HasSubstr("SMTP 127.0.0.1:"));
  EXPECT_THAT(table, HasSubstr("HTTP 200"));
}

TEST_F(NotifyEndToEndTest, AReceiverThatIsDownGetsItOnceWhenItComesBackAndALostRunIsTold) {
  auto receiver = Receiver::Start(dir_, {"--http-port", "0"});
  ASSERT_NE(receiver, nullptr);
  const int port = receiver->http_port();
  receiver->Stop();  // down: connections refused
  Cluster c;
  c.StartCartd(Config(1));
  const int64_t sub = AddSubscription(c, {"--on", "lost", "--lost-after", "2s", "--webhook",
                                          StrCat("http://127.0.0.1:", port, "/hook")});
  c.Cart({"sweep", "submit",
          c.WriteFile("long.yaml", StrCat("name: long\nbase:\n", RunBase(c.SynthData(), 100000, 50),
                                          "seeds: [1]\n"))});
  const pid_t worker = c.StartWorker("w1");
  ASSERT_TRUE(c.WaitFor([&] { return !c.Series(1, "loss").empty(); }, std::chrono::seconds(60)));
  c.Signal(worker, SIGKILL);  // no worker takes it again: lost after the lease (3 s) + 2 s
  c.Wait(worker);
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const json log = NotifyLog(c, sub);
        return !log.empty() && Count(log[0], "tries") >= 2;
      },
      std::chrono::seconds(60)))
      << c.Log("cartd.log");
  json log = NotifyLog(c, sub);
  EXPECT_EQ(log[0]["state"], "PENDING");
  EXPECT_THAT(Text(log[0]["log"][0]["detail"]), HasSubstr("refused")) << log.dump();
  EXPECT_THAT(Text(log[0]["summary"]), HasSubstr("lost its worker testbox-w1")) << log.dump();

  receiver = Receiver::Start(dir_, {"--http-port", std::to_string(port)}, receiver->records());
  ASSERT_NE(receiver, nullptr);
  ASSERT_TRUE(c.WaitFor([&] { return NotifyLog(c, sub)[0]["state"] == "DELIVERED"; },
                        std::chrono::seconds(30)));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const std::vector<json> hooks = OfKind(receiver->Records(), "http", "/hook");
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(json::parse(hooks[0]["body"].get<std::string>())["event"], "lost");
}

TEST_F(NotifyEndToEndTest, CartdKilledBeforeItReadsAnEventOrDeliversItDeliversItOnceAfterRestart) {
  auto receiver = Receiver::Start(dir_, {"--http-port", "0"});
  ASSERT_NE(receiver, nullptr);
  const int port = receiver->http_port();
  receiver->Stop();
  Cluster c;
  // A first cartd that looks for new events only once a minute: it dies before it has read them.
  c.StartCartd(Config(1, /*scan_interval_ms=*/60000));
  const int64_t sub = AddSubscription(
      c, {"--on", "failed", "--webhook", StrCat("http://127.0.0.1:", port, "/hook")});
  FailingSweep(c, "a");
  const pid_t worker = c.StartWorker("w1");
  ASSERT_TRUE(c.WaitFor([&] { return c.Runs("a")[0].state() == cart::v1::RUN_STATE_FAILED; },
                        std::chrono::seconds(60)));
  EXPECT_TRUE(NotifyLog(c, sub).empty());  // not read yet
  c.KillCartd(SIGKILL);

  // Restarted: it reads the event, cannot deliver (the receiver is down), and is killed again.
  c.StartCartd(Config(1));
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const json log = NotifyLog(c, sub);
        return !log.empty() && Count(log[0], "tries") >= 1;
      },
      std::chrono::seconds(30)))
      << c.Log("cartd.log");
  EXPECT_EQ(NotifyLog(c, sub)[0]["state"], "PENDING");
  c.KillCartd(SIGKILL);

  receiver = Receiver::Start(dir_, {"--http-port", std::to_string(port)}, receiver->records());
  ASSERT_NE(receiver, nullptr);
  c.StartCartd(Config(1));
  ASSERT_TRUE(c.WaitFor([&] { return NotifyLog(c, sub)[0]["state"] == "DELIVERED"; },
                        std::chrono::seconds(30)))
      << c.Log("cartd.log");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const std::vector<json> hooks = OfKind(receiver->Records(), "http", "/hook");
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(json::parse(hooks[0]["body"].get<std::string>())["event"], "failed");
  c.Signal(worker, SIGTERM);
}

TEST_F(NotifyEndToEndTest, AnSmtpServerThatRefusesIsLoggedWithItsReplyAndRetried) {
  auto receiver = Receiver::Start(
      dir_, {"--smtp-port", "0", "--smtp-refuse-rcpt", "550 5.1.1 no such user here"});
  ASSERT_NE(receiver, nullptr);
  Cluster c;
  c.StartCartd(Config(receiver->smtp_port()));
  c.Cart({"sweep", "submit",
          c.WriteFile("s.yaml",
                      StrCat("name: s\nbase:\n", RunBase(c.SynthData(), 5, 5), "seeds: [1]\n"))});
  const int64_t sub = AddSubscription(c, {"--on", "failed", "--email", "nobody@lab.example"});
  const std::string sent = c.Cart({"notify", "test", std::to_string(sub)});
  EXPECT_THAT(sent, HasSubstr("queued"));
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const json log = NotifyLog(c, sub);
        return !log.empty() && Count(log[0], "tries") >= 2;
      },
      std::chrono::seconds(30)))
      << c.Log("cartd.log");
  const json n = NotifyLog(c, sub)[0];
  EXPECT_EQ(n["state"], "PENDING");
  EXPECT_EQ(n["event"], "test");
  EXPECT_THAT(n["log"][0]["detail"].get<std::string>(), HasSubstr("550 5.1.1 no such user here"));
  EXPECT_TRUE(OfKind(receiver->Records(), "smtp").empty());
  // Bad input is refused by name.
  int code = 0;
  c.Cart({"notify", "add", "--on", "failed,melted", "--webhook", "http://127.0.0.1:1/x"},
         /*allow_failure=*/true, &code);
  EXPECT_EQ(code, 2);
  code = 0;
  c.Cart({"notify", "add", "--on", "failed", "--webhook", "ftp://x/y"}, /*allow_failure=*/true,
         &code);
  EXPECT_EQ(code, 2);
}

}  // namespace
}  // namespace cart::testing
