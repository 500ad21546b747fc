// cart runs tag | untag | note and cart sweep tag | untag | note: what researchers write on runs
// and sweeps (docs/python.md "Tags and notes" has the rules; cartd's Annotate RPC stores them).

#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cart/v1/scheduler.grpc.pb.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/strings.h"

namespace cart::cli {
namespace {

struct AnnotateArgs {
  Conn conn;
  std::string target;  // a run id or "<sweep>/<index>", or a sweep name
  std::vector<std::string> tags;
  std::string text;
  std::string file;
  bool clear = false;
};

// The request's target: a sweep by name, or a run by id or by name (one GetRun to find its id).
void SetTarget(Client& client, const std::string& target, bool sweep,
               cart::v1::AnnotateRequest* req) {
  if (sweep) {
    req->set_sweep(target);
    return;
  }
  if (std::optional<int64_t> id = ParseInt64(target)) {
    if (*id <= 0) ExitWith(absl::InvalidArgumentError(StrCat("run id ", *id, " is not positive")));
    req->set_run_id(*id);
    return;
  }
  if (target.find('/') == std::string::npos) {
    ExitWith(absl::InvalidArgumentError(
        StrCat("run '", target, "' is neither a run id nor a name <sweep>/<index>")));
  }
  cart::v1::GetRunRequest get;
  get.set_name(target);
  auto run = client.Call<cart::v1::GetRunRequest, cart::v1::GetRunResponse>(
      &cart::v1::SchedulerService::Stub::GetRun, get);
  req->set_run_id(run.run().run_id());
}

// Sends the change and prints what the run or sweep carries afterwards (JSON with --json).
void SendAndPrint(Client& client, const AnnotateArgs& a, bool sweep,
                  const cart::v1::AnnotateRequest& req, bool note_too) {
  auto resp = client.Call<cart::v1::AnnotateRequest, cart::v1::AnnotateResponse>(
      &cart::v1::SchedulerService::Stub::Annotate, req);
  if (a.conn.json) {
    std::cout << ToJson(resp) << "\n";
    return;
  }
  const std::string what = StrCat(sweep ? "sweep " : "run ", a.target);
  std::vector<std::string> names;
  for (const auto& tag : resp.tags()) names.push_back(tag.name());
  std::cout << fmt::format("{}: tags {}\n", what, names.empty() ? "(none)" : StrJoin(names, ", "));
  if (!note_too) return;
  std::cout << (resp.note().text().empty() ? "note: (none)\n" : NoteBlock(resp.note()));
}

// `cart runs|sweep tag|untag TARGET TAGS...`: adds (or removes) the tags and prints the result.
void TagCommand(const AnnotateArgs& a, bool add, bool sweep) {
  Client client = Client::Connect(a.conn);
  cart::v1::AnnotateRequest req;
  SetTarget(client, a.target, sweep, &req);
  for (const std::string& tag : a.tags) {
    *(add ? req.add_add_tags() : req.add_remove_tags()) = tag;
  }
  SendAndPrint(client, a, sweep, req, /*note_too=*/false);
}

// `cart runs|sweep note TARGET [TEXT | --file F | --clear]`: writes, clears or shows the note.
void NoteCommand(const AnnotateArgs& a, bool sweep) {
  const int given = !a.text.empty() + !a.file.empty() + a.clear;
  if (given > 1) {
    ExitWith(absl::InvalidArgumentError("give the note as text, --file or --clear, not several"));
  }
  Client client = Client::Connect(a.conn);
  cart::v1::AnnotateRequest req;
  SetTarget(client, a.target, sweep, &req);
  if (!a.file.empty()) {
    std::stringstream text;
    if (a.file == "-") {
      text << std::cin.rdbuf();
    } else {
      std::ifstream in(a.file, std::ios::binary);
      if (!in) ExitWith(absl::NotFoundError(StrCat("--file ", a.file, ": cannot be read")));
      text << in.rdbuf();
    }
    if (std::optional<size_t> bad = FirstInvalidUtf8(text.str())) {
      ExitWith(absl::InvalidArgumentError(
          StrCat("--file ", a.file, ": not UTF-8 text (byte ", *bad, ")")));
    }
    req.set_set_note(true);
    req.set_note(text.str());
  } else if (!a.text.empty() || a.clear) {
    req.set_set_note(true);
    req.set_note(a.text);
  }
  // With nothing to change, the same call answers what is there (an empty change is a no-op).
  SendAndPrint(client, a, sweep, req, /*note_too=*/true);
}

}  // namespace

void AddAnnotateCommands(CLI::App* parent, bool sweep) {
  const char* noun = sweep ? "sweep" : "run";
  const char* target_help = sweep ? "Sweep name" : "Run id, or its name <sweep>/<index>";
  for (const bool add : {true, false}) {
    auto a = std::make_shared<AnnotateArgs>();
    CLI::App* cmd = parent->add_subcommand(
        add ? "tag" : "untag",
        add ? fmt::format("Add tags to a {} (letters, digits, '._:/=+@-'; at most 32)", noun)
            : fmt::format("Remove tags from a {}", noun));
    cmd->add_option("target", a->target, target_help)->required();
    cmd->add_option("tags", a->tags, "Tags")->required();
    AddConnFlags(cmd, a->conn);
    OnRun(cmd, [a, add, sweep] { TagCommand(*a, add, sweep); });
  }

  auto a = std::make_shared<AnnotateArgs>();
  CLI::App* note = parent->add_subcommand(
      "note", fmt::format("Show, write or clear a {}'s note (at most 8,192 bytes)", noun));
  note->add_option("target", a->target, target_help)->required();
  note->add_option("text", a->text, "The new note (replaces the old one)");
  note->add_option("--file", a->file, "Read the new note from this file ('-': standard input)");
  note->add_flag("--clear", a->clear, "Remove the note");
  AddConnFlags(note, a->conn);
  OnRun(note, [a, sweep] { NoteCommand(*a, sweep); });
}

}  // namespace cart::cli
