// `cart report` (report/: the paper's tables and claims decided from a results database):
// each part's section and its tables; the claims are decided in claims.cc, written in write.cc.

#include "report/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <type_traits>

#include "common/file.h"
#include "common/status.h"
#include "common/strings.h"
#include "report/claims.h"
#include "report/internal/select.h"
#include "report/internal/tables.h"
#include "report/stats.h"
#include "store/results.h"

namespace cart::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kCurvePoints = 200;  // points per loss / ρ curve

using internal::CellValue;
using internal::Distinct;
using internal::kNone;
using internal::MeanOrNaN;
using internal::NoteProgress;
using internal::Num;
using internal::Paper;
using internal::PaperCell;
using internal::Param;
using internal::PivotTables;
using internal::Runs;
using internal::SameConfigBut;
using internal::Signed;
using internal::Stat;
using internal::Text;
using internal::Where;

std::string ValSetOf(const std::vector<StudyRun>& all, const std::string& wanted) {
  if (!wanted.empty()) return wanted;
  std::set<std::string> sets;
  for (const StudyRun& r : all) {
    for (const auto& [name, v] : r.values) {
      if (name.rfind("val_ppl/", 0) == 0) sets.insert(name.substr(8));
    }
  }
  if (sets.count("wiki")) return "wiki";
  return sets.empty() ? std::string("wiki") : *sets.begin();
}

Runs Train(const std::vector<StudyRun>& all) {
  Runs out;
  for (const StudyRun& r : all) {
    if (r.kind == JobKind::kTrain) out.push_back(&r);
  }
  return out;
}

// Which R is best (lowest mean metric) for one d; "" when none finished.
std::pair<std::string, double> BestR(const Runs& runs, const std::string& metric) {
  std::pair<std::string, double> best = {"", kNaN};
  for (const std::string& r : Distinct(runs, "R")) {
    const CellValue v = Stat(Where(runs, {{"R", r}}), metric);
    if (v.stats.n == 0 || std::isnan(v.stats.mean)) continue;
    if (best.first.empty() || v.stats.mean < best.second) best = {r, v.stats.mean};
  }
  return best;
}

class Builder {
 public:
  Builder(StudySource& source, const ReportOptions& options) : source_(source), options_(options) {}

  absl::StatusOr<Report> Build() {
    const StudySweeps& sw = options_.sweeps;
    for (const std::string* name : {&sw.stage1, &sw.stage2, &sw.baselines, &sw.ablations,
                                    &sw.faithfulness, &sw.leak, &sw.variable_r}) {
      if (runs_.count(*name)) continue;
      CART_ASSIGN_OR_RETURN(runs_[*name], source_.Runs(*name));
    }
    std::vector<StudyRun> everything;
    for (const auto& [name, runs] : runs_)
      everything.insert(everything.end(), runs.begin(), runs.end());
    for (const StudyRun& r : everything) {
      if (r.device_classes.size() > 1) {
        report_.spanning_runs.push_back(
            fmt::format("{}: {}", r.name, StrJoin(r.device_classes, ", then ")));
      }
    }
    report_.title = options_.title;
    report_.val_set = ValSetOf(everything, options_.val_set);
    ppl_ = "val_ppl/" + report_.val_set;

    CART_RETURN_IF_ERROR(Stage2());
    Stage1();
    Reversal();
    Parity();
    Ablations();
    CART_RETURN_IF_ERROR(VariableR());
    CART_RETURN_IF_ERROR(Leak());
    Faithfulness();
    CART_RETURN_IF_ERROR(Claims());
    CART_RETURN_IF_ERROR(Costs());
    return report_;
  }

 private:
  Section& NewSection(const std::string& title, const std::string& sweep) {
    report_.sections.push_back(Section{});
    report_.sections.back().title = title;
    report_.sections.back().sweep = sweep;
    return report_.sections.back();
  }

  absl::Status Stage2() {
    Section& s = NewSection("Stage 2: width × loops, three seeds", options_.sweeps.stage2);
    const Runs runs = Train(runs_[s.sweep]);
    if (!NoteProgress(s, runs, "training")) return absl::OkStatus();
    Plot heat;
    heat.id = "rho_heatmap";
    heat.title = "ρ = max σ(a) at the last step, mean over seeds";
    heat.kind = Plot::Kind::kHeatmap;
    PivotTables(s, runs, "rho_max", "d", "R", "rho_stage2", "ρ by d × R", 4, &heat);
    PivotTables(s, runs, ppl_, "d", "R", "wiki_ppl_stage2",
                fmt::format("Validation perplexity ({}) by d × R", report_.val_set), 2, nullptr);
    PivotTables(s, runs, "loss", "d", "R", "loss_stage2", "Training loss at the last step by d × R",
                4, nullptr);
    s.plots.push_back(heat);

    // ρ trend: does it rise with d at every R (as published)?
    int rising = 0, columns = 0;
    double lo = kNaN, hi = kNaN;
    for (const std::string& r : Distinct(runs, "R")) {
      std::vector<double> by_d;
      for (const std::string& d : Distinct(runs, "d")) {
        const CellValue v = Stat(Where(runs, {{"d", d}, {"R", r}}), "rho_max");
        if (v.stats.n == 0) continue;
        by_d.push_back(v.stats.mean);
        lo = std::isnan(lo) ? v.stats.mean : std::min(lo, v.stats.mean);
        hi = std::isnan(hi) ? v.stats.mean : std::max(hi, v.stats.mean);
      }
      if (by_d.size() < 2) continue;
      ++columns;
      rising += std::is_sorted(by_d.begin(), by_d.end());
    }
    if (!std::isnan(lo)) {
      s.findings.push_back(fmt::format(
          "ρ ended between {:.4f} and {:.4f}; it starts at σ(ln 9) = 0.9 (published: 0.790–0.830 "
          "after 30,500 steps).",
          lo, hi));
    }
    if (columns > 0) {
      s.findings.push_back(
          fmt::format("ρ rises with width at {} of {} loop counts (published: at every one).",
                      rising, columns));
    }

    Plot rho_steps, ppl_r, loss;
    rho_steps.id = "rho_steps";
    rho_steps.title = "ρ over training steps (mean over seeds)";
    rho_steps.xlabel = "step";
    rho_steps.ylabel = "max σ(a)";
    loss.id = "loss_curves";
    loss.title = "Training loss (mean; band: min–max over seeds)";
    loss.xlabel = "step";
    loss.ylabel = "loss";
    ppl_r.id = "ppl_vs_R";
    ppl_r.title = fmt::format("Validation perplexity ({}) vs loops R", report_.val_set);
    ppl_r.xlabel = "R";
    ppl_r.discrete_x = true;
    ppl_r.ylabel = "perplexity";
    absl::Status error;
    for (const std::string& d : Distinct(runs, "d")) {
      PlotSeries line;
      line.label = "d=" + d;
      for (const std::string& r : Distinct(runs, "R")) {
        const Runs cell = Where(runs, {{"d", d}, {"R", r}});
        if (cell.empty()) continue;
        const std::string label = fmt::format("d={} R={}", d, r);
        rho_steps.series.push_back(MeanCurve(source_, cell, "rho_max", label, &error));
        loss.series.push_back(MeanCurve(source_, cell, "loss", label, &error));
        CART_RETURN_IF_ERROR(error);
        const CellValue v = Stat(cell, ppl_);
        if (v.stats.n > 0) {
          line.x.push_back(ParseDouble(r).value_or(0));
          line.y.push_back(v.stats.mean);
        }
      }
      if (!line.x.empty()) ppl_r.series.push_back(line);
    }
    s.plots.push_back(rho_steps);
    s.plots.push_back(ppl_r);
    s.plots.push_back(loss);
    return absl::OkStatus();
  }

  void Stage1() {
    Section& s = NewSection("Stage 1: the short-budget grid", options_.sweeps.stage1);
    const Runs runs = Train(runs_[s.sweep]);
    if (!NoteProgress(s, runs, "training")) return;
    Table t;
    t.id = "stage1";
    t.title = "Every stage-1 config (one seed each)";
    t.columns = {"d", "R", "P", "loss", ppl_, "rho_max", "runs done"};
    for (const std::string& d : Distinct(runs, "d")) {
      for (const std::string& r : Distinct(runs, "R")) {
        for (const std::string& p : Distinct(runs, "P")) {
          const Runs cell = Where(runs, {{"d", d}, {"R", r}, {"P", p}});
          if (cell.empty()) continue;
          const CellValue loss = Stat(cell, "loss");
          t.rows.push_back({d, r, p, Text(loss, 4), Text(Stat(cell, ppl_), 2),
                            Text(Stat(cell, "rho_max"), 4),
                            fmt::format("{}/{}", loss.stats.n, cell.size())});
        }
      }
    }
    s.tables.push_back(std::move(t));
  }

  void Reversal() {
    Section& s = NewSection("The benefit of more loops, stage 1 against stage 2",
                            options_.sweeps.stage1 + " → " + options_.sweeps.stage2);
    const Runs a = Train(runs_[options_.sweeps.stage1]);
    const Runs b = Train(runs_[options_.sweeps.stage2]);
    if (a.empty() || b.empty()) {
      s.status.push_back("needs finished runs of both stages: nothing to compare yet");
      return;
    }
    // Stage 1 varies P too: compare at stage 2's P where stage 1 has it.
    Runs a_at_p = a;
    const std::vector<std::string> pb = Distinct(b, "P");
    if (pb.size() == 1 && !Where(a, {{"P", pb[0]}}).empty()) a_at_p = Where(a, {{"P", pb[0]}});
    Table t;
    t.id = "r_benefit";
    t.title = fmt::format("Best R per width by {} (lowest), at P = {}", ppl_,
                          pb.size() == 1 ? pb[0] : "all");
    t.paper_section = Paper("wiki_ppl_stage2") ? Paper("wiki_ppl_stage2")->section : "";
    t.columns = {"d", "stage 1 best R", "stage 2 best R", "published stage 2 best R",
                 "ranking changed"};
    int changed = 0, compared = 0;
    for (const std::string& d : Distinct(b, "d")) {
      const auto best_a = BestR(Where(a_at_p, {{"d", d}}), ppl_);
      const auto best_b = BestR(Where(b, {{"d", d}}), ppl_);
      // The published best R: argmin over the paper's stage-2 row for this d.
      std::string paper_best = kNone;
      double paper_min = kNaN;
      if (const PaperTable* p = Paper("wiki_ppl_stage2")) {
        for (const auto& [key, v] : p->cells) {
          const std::vector<std::string> parts = Split(key, '/');
          if (parts.size() == 2 && parts[0] == d && (std::isnan(paper_min) || v < paper_min)) {
            paper_min = v;
            paper_best = parts[1];
          }
        }
      }
      std::string flag = kNone;
      if (!best_a.first.empty() && !best_b.first.empty()) {
        ++compared;
        changed += best_a.first != best_b.first;
        flag = best_a.first != best_b.first ? "yes" : "no";
      }
      t.rows.push_back({d, best_a.first.empty() ? kNone : best_a.first,
                        best_b.first.empty() ? kNone : best_b.first, paper_best, flag});
    }
    s.tables.push_back(std::move(t));
    // Spearman rank correlation of the (d, R) configs both stages ran.
    std::vector<double> va, vb;
    for (const std::string& d : Distinct(b, "d")) {
      for (const std::string& r : Distinct(b, "R")) {
        const CellValue x = Stat(Where(a_at_p, {{"d", d}, {"R", r}}), ppl_);
        const CellValue y = Stat(Where(b, {{"d", d}, {"R", r}}), ppl_);
        if (x.stats.n > 0 && y.stats.n > 0) {
          va.push_back(x.stats.mean);
          vb.push_back(y.stats.mean);
        }
      }
    }
    if (compared > 0) {
      s.findings.push_back(fmt::format(
          "The best loop count changed between the stages at {} of {} widths.", changed, compared));
    }
    if (va.size() >= 2) {
      const double rho = stats::Spearman(va, vb).r;
      s.findings.push_back(fmt::format(
          "Spearman rank correlation of the {} configs both stages ran: {:.3f} (1: the short "
          "budget ranks them as the long one does).",
          va.size(), rho));
    }
  }

  void Parity() {
    Section& s = NewSection("Parity with dense baselines", options_.sweeps.baselines);
    const Runs dense = Train(runs_[s.sweep]);
    const Runs cart = Train(runs_[options_.sweeps.stage2]);
    if (!NoteProgress(s, dense, "dense baseline")) return;
    // CART to compare with: stage 2 at the baselines' width, at each of its loop counts.
    const std::vector<std::string> widths = Distinct(dense, "d");
    const std::string d = widths.empty() ? "" : widths.back();
    Runs cart_d = Where(cart, {{"d", d}});
    const std::vector<std::string> rs = Distinct(cart_d, "R");
    Table t;
    t.id = "parity";
    t.title = fmt::format("{} at d = {}", ppl_, d);
    t.paper_section = Paper("parity") ? Paper("parity")->section : "";
    t.columns = {"model", "stored params", ppl_, "published", "ours − published"};
    const bool paper_scale = d == "1024";
    std::vector<std::pair<std::string, CellValue>> carts;
    for (const std::string& r : rs) {
      const Runs cell = Where(cart_d, {{"R", r}});
      const CellValue v = Stat(cell, ppl_);
      const std::string label = "CART R=" + r;
      const double pv = PaperCell("parity", label);
      t.rows.push_back({label, fmt::format("{:.2f}M", cell.front()->stored_params / 1e6),
                        Text(v, 2), Num(pv, 2),
                        paper_scale ? Signed(MeanOrNaN(v) - pv, 2) : "other scale"});
      if (v.stats.n > 0) carts.emplace_back(r, v);
    }
    if (rs.empty()) {
      s.status.push_back(fmt::format("no stage-2 CART runs at d = {} to compare with", d));
    }
    for (const std::string& layers : Distinct(dense, "layers")) {
      const Runs cell = Where(dense, {{"layers", layers}});
      const CellValue v = Stat(cell, ppl_);
      const std::string label = "dense " + layers + " layers";
      const double pv = PaperCell("parity", label);
      t.rows.push_back({label, fmt::format("{:.2f}M", cell.front()->stored_params / 1e6),
                        Text(v, 2), Num(pv, 2),
                        paper_scale ? Signed(MeanOrNaN(v) - pv, 2) : "other scale"});
      for (const auto& [r, c] : carts) {
        if (v.stats.n == 0) continue;
        s.findings.push_back(fmt::format(
            "CART R={} is {:.2f} perplexity {} the {}-layer dense model (published at d = 1024: "
            "CART R=6 20.35 against 20.13 for 7 layers and 18.32 for 12).",
            r, std::abs(c.stats.mean - v.stats.mean),
            c.stats.mean > v.stats.mean ? "above" : "below", layers));
      }
    }
    s.tables.push_back(std::move(t));
  }

  void Ablations() {
    Section& s = NewSection("Ablations", options_.sweeps.ablations);
    const Runs runs = Train(runs_[s.sweep]);
    if (!NoteProgress(s, runs, "ablation")) return;
    // The baseline's R: the largest R among frozen, shared, cross, hyper-on runs.
    const Runs plain = Where(
        runs, {{"kv", "frozen"}, {"core", "shared"}, {"core_attn", "cross"}, {"hyper", "on"}});
    const std::vector<std::string> rs = Distinct(plain, "R");
    if (rs.empty()) {
      s.status.push_back("no baseline run (kv frozen, shared cross-attention core, hyper on)");
      return;
    }
    const std::string base_r = rs.back();
    struct Variant {
      std::string label;
      std::map<std::string, std::string> match;
    };
    const std::vector<Variant> variants = {
        {"baseline",
         {{"kv", "frozen"},
          {"R", base_r},
          {"core", "shared"},
          {"core_attn", "cross"},
          {"hyper", "on"}}},
        {"recompute K,V", {{"kv", "recompute"}, {"core", "shared"}, {"hyper", "on"}}},
        {"R = 1", {{"kv", "frozen"}, {"R", "1"}, {"core", "shared"}, {"hyper", "on"}}},
        {"unshared core", {{"core", "unshared"}, {"core_attn", "cross"}, {"hyper", "on"}}},
        {"unshared self-attention core", {{"core", "unshared"}, {"core_attn", "self"}}},
        {"no hyper-connection", {{"kv", "frozen"}, {"core", "shared"}, {"hyper", "off"}}},
    };
    const CellValue base = Stat(Where(runs, variants[0].match), ppl_);
    const double paper_base = PaperCell("ablations", "baseline");
    Table t;
    t.id = "ablations";
    t.title = fmt::format("{} per ablation, against the baseline (R = {})", ppl_, base_r);
    t.paper_section = Paper("ablations") ? Paper("ablations")->section : "";
    t.columns = {"variant", ppl_, "Δ", "Δ %", "published", "published Δ %", "same direction"};
    int agree = 0, compared = 0;
    for (const Variant& v : variants) {
      const Runs cell = Where(runs, v.match);
      const CellValue c = Stat(cell, ppl_);
      const double delta = MeanOrNaN(c) - MeanOrNaN(base);
      const double rel = delta / MeanOrNaN(base) * 100;
      const double pv = PaperCell("ablations", v.label);
      const double prel = (pv - paper_base) / paper_base * 100;
      std::string same = kNone;
      if (v.label != "baseline" && !std::isnan(rel) && !std::isnan(prel)) {
        ++compared;
        const bool ok = (rel < 0) == (prel < 0);
        agree += ok;
        same = ok ? "yes" : "no";
      }
      t.rows.push_back({v.label, cell.empty() ? "not run" : Text(c, 2), Signed(delta, 2),
                        Signed(rel, 1), Num(pv, 2), Signed(prel, 1), same});
    }
    s.tables.push_back(std::move(t));
    if (compared > 0) {
      s.findings.push_back(fmt::format(
          "{} of {} ablations move perplexity in the published direction (the claims table says "
          "which of them the seeds can tell from seed noise).",
          agree, compared));
    }
  }

  // The variable-R evaluations: the variable_r sweep's, else stage 2's own derived evaluation
  // jobs; one curve is one trained shape, so with several widths the widest, as the paper does.
  // `from` says which sweep they came from, `widths` how many widths there were.
  Runs VariableREvals(std::string* from, size_t* widths) {
    Runs evals;
    *from = options_.sweeps.variable_r;
    for (const StudyRun& r : runs_[options_.sweeps.variable_r]) {
      if (r.kind == JobKind::kEval) evals.push_back(&r);
    }
    if (evals.empty()) {
      for (const StudyRun& r : runs_[options_.sweeps.stage2]) {
        if (r.kind == JobKind::kEval) evals.push_back(&r);
      }
      if (!evals.empty()) *from = options_.sweeps.stage2 + " (its eval jobs)";
    }
    const std::vector<std::string> eval_widths = Distinct(evals, "d");
    *widths = eval_widths.size();
    if (eval_widths.size() > 1) evals = Where(evals, {{"d", eval_widths.back()}});
    return evals;
  }

  absl::Status VariableR() {
    Section& s = NewSection("Variable-R inference", options_.sweeps.variable_r);
    size_t widths = 0;
    Runs evals = VariableREvals(&s.sweep, &widths);
    if (!NoteProgress(s, evals, "evaluation")) return absl::OkStatus();
    if (widths > 1) {
      s.findings.push_back(fmt::format("Evaluations of {} widths found; the table shows d = {}.",
                                       widths, Param(*evals.front(), "d")));
    }
    int64_t finished_evals = 0;
    for (const StudyRun* r : evals) finished_evals += r->finished;
    // The metrics eval jobs log: val_ppl/SET, task_acc/…, task_acc_norm/…, task_ppl/… by R_infer.
    std::set<std::string> metrics;
    for (const StudyRun* r : evals) {
      for (const auto& [name, v] : r->values) {
        if (name.rfind("val_ppl/", 0) == 0 || name.rfind("task_", 0) == 0) metrics.insert(name);
      }
    }
    std::map<std::string, std::map<int64_t, std::vector<double>>> by_metric;  // metric -> R -> v
    for (const StudyRun* r : evals) {
      if (!r->finished) continue;
      for (const std::string& m : metrics) {
        CART_ASSIGN_OR_RETURN(std::vector<StudyPoint> pts, source_.Series(r->id, m, 0));
        for (const StudyPoint& p : pts) by_metric[m][p.step].push_back(p.value);
      }
    }
    std::set<int64_t> loops;
    for (const auto& [m, rv] : by_metric) {
      for (const auto& [r, v] : rv) loops.insert(r);
    }
    const std::string trained_r = Param(*evals.front(), "R");
    Table t;
    t.id = "variable_r";
    t.title = fmt::format(
        "Evaluation at R_infer loops of models trained at R = {} (mean over {} finished "
        "models)",
        trained_r, finished_evals);
    t.paper_section =
        Paper("variable_r_lambada_ppl") ? Paper("variable_r_lambada_ppl")->section : "";
    t.columns = {"R_infer"};
    for (const std::string& m : metrics) t.columns.push_back(m);
    t.columns.push_back("published LAMBADA ppl");
    Plot plot;
    plot.id = "variable_r";
    plot.title = fmt::format("Perplexity vs inference loops (trained at R = {})", trained_r);
    plot.xlabel = "R_infer";
    plot.discrete_x = true;
    plot.ylabel = "perplexity";
    plot.log_y = true;
    std::map<std::string, PlotSeries> lines;
    for (int64_t r : loops) {
      std::vector<std::string> row = {std::to_string(r)};
      for (const std::string& m : metrics) {
        auto it = by_metric[m].find(r);
        if (it == by_metric[m].end()) {
          row.push_back(kNone);
          continue;
        }
        const store::CellStats st = store::Summarize(it->second);
        const bool ppl = m.find("ppl") != std::string::npos;
        row.push_back(FormatStats(st, ppl ? 2 : 4));
        if (ppl) {
          lines[m].label = m;
          lines[m].x.push_back(static_cast<double>(r));
          lines[m].y.push_back(st.mean);
        }
      }
      row.push_back(Num(PaperCell("variable_r_lambada_ppl", std::to_string(r)), 1));
      t.rows.push_back(std::move(row));
    }
    s.tables.push_back(std::move(t));
    for (auto& [m, line] : lines) plot.series.push_back(std::move(line));
    if (!plot.series.empty()) s.plots.push_back(std::move(plot));
    // Where is each perplexity lowest, and how does going past the trained R compare?
    for (const std::string& m : metrics) {
      if (m.find("ppl") == std::string::npos || by_metric[m].empty()) continue;
      int64_t best = -1;
      double best_v = kNaN;
      for (const auto& [r, v] : by_metric[m]) {
        const double mean = store::Summarize(v).mean;
        if (best < 0 || mean < best_v) best = r, best_v = mean;
      }
      s.findings.push_back(fmt::format(
          "{} is lowest at R_infer = {} ({:.2f}); the models were trained at R = {} (published, "
          "LAMBADA: lowest at the trained R = 6, 163.7; 269.4 at 16; 2632.6 at 2).",
          m, best, best_v, trained_r));
    }
    return absl::OkStatus();
  }

  absl::Status Leak() {
    Section& s = NewSection("The leak: non-causal cross-attention", options_.sweeps.leak);
    const Runs runs = Train(runs_[s.sweep]);
    if (!NoteProgress(s, runs, "training")) return absl::OkStatus();
    // Validation set: the leak sweep's own (a synthetic source knows its entropy floor).
    std::string set = report_.val_set;
    for (const auto& [name, v] : runs.front()->values) {
      if (name.rfind("entropy_floor/", 0) == 0) set = name.substr(14);
    }
    Table t;
    t.id = "leak";
    t.title = fmt::format("Causal against non-causal cross-attention (validation set {})", set);
    t.paper_section = Paper("leak") ? Paper("leak")->section : "";
    t.columns = {"cross_causal",    "first loss",     "final loss",    "lowest loss",
                 "val loss/" + set, "val ppl/" + set, "entropy floor", "below the floor"};
    absl::Status error;
    for (const std::string& causal : Distinct(runs, "cross_causal")) {
      const Runs cell = Where(runs, {{"cross_causal", causal}});
      // Booleans are stored as on/off; sweep files may say true/false.
      const bool causal_on = causal == "on" || causal == "true";
      const PlotSeries curve = MeanCurve(source_, cell, "loss", causal, &error);
      CART_RETURN_IF_ERROR(error);
      const double first = curve.y.empty() ? kNaN : curve.y.front();
      const double lowest =
          curve.y.empty() ? kNaN : *std::min_element(curve.y.begin(), curve.y.end());
      const CellValue val = Stat(cell, "val_loss/" + set);
      const CellValue floor = Stat(cell, "entropy_floor/" + set);
      std::string below = kNone;
      if (val.stats.n > 0 && floor.stats.n > 0) {
        below = val.stats.mean < floor.stats.mean ? "yes" : "no";
        if (!causal_on && val.stats.mean < floor.stats.mean) {
          s.findings.push_back(fmt::format(
              "Non-causal cross-attention reached a validation loss of {:.4f} nats, {:.4f} below "
              "the entropy floor {:.4f} that no causal model can beat: the leak is reproduced "
              "(published: train loss 4.24 → 0.13, validation perplexity ≈ 1.0–1.3).",
              val.stats.mean, floor.stats.mean - val.stats.mean, floor.stats.mean));
        }
        if (causal_on && val.stats.mean >= floor.stats.mean) {
          s.findings.push_back(
              fmt::format("The causal twin stays above the floor ({:.4f} ≥ {:.4f}), as it must.",
                          val.stats.mean, floor.stats.mean));
        }
      }
      t.rows.push_back({causal_on ? causal + " (causal)" : causal + " (sees the future)",
                        Num(first, 4), Text(Stat(cell, "loss"), 4), Num(lowest, 4), Text(val, 4),
                        Text(Stat(cell, "val_ppl/" + set), 3), Text(floor, 4), below});
    }
    s.tables.push_back(std::move(t));
    Plot plot;
    plot.id = "leak_loss";
    plot.title = "Training loss, causal vs non-causal cross-attention";
    plot.xlabel = "step";
    plot.ylabel = "loss";
    for (const std::string& causal : Distinct(runs, "cross_causal")) {
      plot.series.push_back(MeanCurve(source_, Where(runs, {{"cross_causal", causal}}), "loss",
                                      "cross_causal=" + causal, &error));
      CART_RETURN_IF_ERROR(error);
    }
    s.plots.push_back(std::move(plot));
    return absl::OkStatus();
  }

  // The faithfulness part's runs. Its reference arm (the reference code's gate, weight decay on
  // every parameter) is often the ablations' baseline itself, so a faithfulness sweep may leave
  // it out: then the ablations' runs of the same recipe (every config key but gate, weight-decay
  // scope and seed equal to one of the faithfulness runs') stand in for it, trained once
  // (docs/study.md). `borrowed` counts them.
  Runs FaithfulnessRuns(size_t* borrowed = nullptr) {
    Runs runs = Train(runs_[options_.sweeps.faithfulness]);
    if (borrowed != nullptr) *borrowed = 0;
    if (runs.empty() || !Where(runs, {{"gate", "paper"}, {"weight_decay_scope", "all"}}).empty()) {
      return runs;
    }
    const Runs reference = Where(Train(runs_[options_.sweeps.ablations]),
                                 {{"gate", "paper"}, {"weight_decay_scope", "all"}});
    const Runs own = runs;
    for (const StudyRun* r : reference) {
      for (const StudyRun* f : own) {
        if (SameConfigBut(*r, *f, {"gate", "weight_decay_scope", "seed"})) {
          runs.push_back(r);
          if (borrowed != nullptr) ++*borrowed;
          break;
        }
      }
    }
    return runs;
  }

  void Faithfulness() {
    Section& s = NewSection("Faithfulness: the double residual and where ρ comes from",
                            options_.sweeps.faithfulness);
    size_t borrowed = 0;
    const Runs runs = FaithfulnessRuns(&borrowed);
    if (!NoteProgress(s, runs, "training")) return;
    if (borrowed > 0) {
      s.findings.push_back(fmt::format(
          "The reference arm (gate: paper, weight decay on every parameter) is the {} runs of "
          "sweep '{}' with the same config: the ablations' baseline, trained once for both.",
          borrowed, options_.sweeps.ablations));
    }
    Table t;
    t.id = "faithfulness";
    t.title = "Gate form × weight-decay scope";
    t.columns = {"gate", "weight_decay_scope", "rho_max", "rho_min", ppl_, "loss"};
    for (const std::string& gate : Distinct(runs, "gate")) {
      for (const std::string& scope : Distinct(runs, "weight_decay_scope")) {
        const Runs cell = Where(runs, {{"gate", gate}, {"weight_decay_scope", scope}});
        if (cell.empty()) continue;
        t.rows.push_back({gate, scope, Text(Stat(cell, "rho_max"), 4),
                          Text(Stat(cell, "rho_min"), 4), Text(Stat(cell, ppl_), 2),
                          Text(Stat(cell, "loss"), 4)});
      }
    }
    s.tables.push_back(std::move(t));
    // Q2: how far does ρ fall from 0.9 with and without decay on a?
    const CellValue all =
        Stat(Where(runs, {{"gate", "paper"}, {"weight_decay_scope", "all"}}), "rho_max");
    const CellValue mat =
        Stat(Where(runs, {{"gate", "paper"}, {"weight_decay_scope", "matrices"}}), "rho_max");
    if (all.stats.n > 0 && mat.stats.n > 0) {
      const double fall_all = 0.9 - all.stats.mean, fall_mat = 0.9 - mat.stats.mean;
      s.findings.push_back(fmt::format(
          "Where ρ comes from: with weight decay on every parameter ρ moved {:+.4f} from 0.9; "
          "with decay on matrices only (a exempt) it moved {:+.4f}. {}",
          -fall_all, -fall_mat,
          std::abs(fall_mat) < 0.25 * std::abs(fall_all)
              ? "Most of ρ's fall is weight decay acting on a, not learning."
              : "ρ also moves without decay on a: the gradient shapes it too."));
    }
    const CellValue paper_gate =
        Stat(Where(runs, {{"gate", "paper"}, {"weight_decay_scope", "all"}}), ppl_);
    const CellValue delta_gate =
        Stat(Where(runs, {{"gate", "delta"}, {"weight_decay_scope", "all"}}), ppl_);
    if (paper_gate.stats.n > 0 && delta_gate.stats.n > 0) {
      s.findings.push_back(fmt::format(
          "The double residual: the paper's stated update (gate: delta) gives {} perplexity {:.2f} "
          "against {:.2f} for the reference code's (gate: paper), {:+.2f}.",
          report_.val_set, delta_gate.stats.mean, paper_gate.stats.mean,
          delta_gate.stats.mean - paper_gate.stats.mean));
    }
  }

  // The claims (report/claims.yaml, or options.claims_file) decided over the parts' runs.
  absl::Status Claims() {
    std::vector<ClaimSpec> specs;
    if (options_.claims_file.empty()) {
      CART_ASSIGN_OR_RETURN(specs, DefaultClaims());
    } else {
      CART_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(options_.claims_file));
      CART_ASSIGN_OR_RETURN(specs, ParseClaims(text, options_.claims_file));
    }
    const StudySweeps& sw = options_.sweeps;
    ClaimInputs in;
    in.val_set = report_.val_set;
    in.parts = {
        {"stage1", Train(runs_[sw.stage1])},       {"stage2", Train(runs_[sw.stage2])},
        {"baselines", Train(runs_[sw.baselines])}, {"ablations", Train(runs_[sw.ablations])},
        {"faithfulness", FaithfulnessRuns()},      {"leak", Train(runs_[sw.leak])}};
    std::string from;
    size_t widths = 0;
    in.parts["variable_r"] = VariableREvals(&from, &widths);
    CART_ASSIGN_OR_RETURN(std::vector<ClaimLook> looks, source_.Looks());
    std::map<int64_t, const StudyRun*> by_id;
    for (const auto& [sweep, runs] : runs_) {
      for (const StudyRun& r : runs) by_id.emplace(r.id, &r);
    }
    for (ClaimLook& look : looks) {
      for (int64_t id : look.run_ids) {
        auto it = by_id.find(id);
        const std::string state = it == by_id.end() ? "" : it->second->state;
        look.pending +=
            state == "QUEUED" || state == "BLOCKED" || state == "LEASED" || state == "RUNNING";
      }
      in.looks[look.claim].push_back(std::move(look));
    }
    in.futility_floor = options_.futility_floor;
    CART_ASSIGN_OR_RETURN(std::vector<ClaimOutcome> outcomes, DecideClaims(source_, specs, in));
    for (const ClaimOutcome& o : outcomes) {
      ClaimLine line;
      line.id = o.spec->id;
      line.claim = o.spec->claim;
      line.section = o.spec->section;
      line.published = o.spec->published;
      line.verdict = VerdictName(o.verdict);
      line.evidence = o.evidence;
      line.confounded = o.confounded;
      line.sequential = o.sequential;
      line.seeds = o.seeds;
      line.runs = static_cast<int64_t>(o.runs.size());
      for (const StudyRun* r : o.runs) store::Add(line.spending, r->spending);
      bool classes_of_confounded = false;
      for (const TestOutcome& t : o.tests) {
        if (line.device_classes.empty() || (t.confounded && !classes_of_confounded)) {
          line.device_classes = t.device_classes;
          classes_of_confounded = t.confounded;
        }
        auto num = [](double v) {
          return std::isnan(v) ? std::string() : fmt::format("{:.6g}", v);
        };
        line.tests.push_back({t.label, t.method, num(t.effect), num(t.low), num(t.high), t.unit,
                              num(t.p), num(t.p_holm), std::to_string(t.n), std::to_string(t.n2),
                              num(t.detectable), num(t.published), VerdictName(t.verdict), t.note,
                              t.device_classes, t.confounded ? "yes" : ""});
        TestNumbers numbers;
        numbers.label = t.label;
        numbers.kind = t.kind;
        numbers.verdict = VerdictName(t.verdict);
        numbers.paired = t.paired;
        numbers.within = t.within;
        numbers.log_scale = t.log_scale;
        numbers.confounded = t.confounded;
        numbers.over_items = t.over_items;
        numbers.se = t.se_raw;
        numbers.published = t.published_raw;
        numbers.n = t.n;
        numbers.n2 = t.n2;
        numbers.arms = t.arms;
        numbers.arm_runs = t.arm_runs;
        line.numbers.push_back(std::move(numbers));
      }
      report_.claims.push_back(std::move(line));
    }
    return absl::OkStatus();
  }

  // What each of the study's sweeps cost (parts sharing a sweep on one row), and the prices.
  absl::Status Costs() {
    if (options_.prices) {
      report_.prices = *options_.prices;
    } else {
      CART_ASSIGN_OR_RETURN(report_.prices, source_.Prices());
    }
    for (const auto& [part, sweep] : StudyParts(options_.sweeps)) {
      const std::vector<StudyRun>& runs = runs_[*sweep];
      if (runs.empty()) continue;
      auto same = std::find_if(report_.costs.begin(), report_.costs.end(),
                               [&](const PartCost& c) { return c.sweep == *sweep; });
      if (same != report_.costs.end()) {
        same->part += ", " + part;
        continue;
      }
      PartCost cost;
      cost.part = part;
      cost.sweep = *sweep;
      cost.runs = static_cast<int64_t>(runs.size());
      for (const StudyRun& r : runs) store::Add(cost.spending, r.spending);
      report_.costs.push_back(std::move(cost));
    }
    CostSection();
    return absl::OkStatus();
  }

  // "What the study cost": a row per claim and a row per sweep with the study's total, as numbers
  // (their CSVs are for reading back); energy and its price only where a counter measured it.
  void CostSection() {
    if (report_.costs.empty()) return;
    const store::EnergyPrices& prices = report_.prices;
    std::vector<std::string> unit_columns = {"runs", "attempts", "device-hours",
                                             "measured attempts", "kWh"};
    if (prices.per_kwh > 0) unit_columns.push_back(prices.currency);
    if (prices.co2_grams_per_kwh > 0) unit_columns.push_back("g CO2");
    auto cells = [&](int64_t runs, const store::Spending& s) {
      const store::SpendingFigures f = store::FiguresOf(s, prices);
      const bool measured = s.measured_attempts > 0;
      std::vector<std::string> row = {
          StrCat(runs), StrCat(s.attempts), fmt::format("{:.4g}", s.device_hours),
          StrCat(s.measured_attempts), measured ? fmt::format("{:.4g}", f.kwh) : kNone};
      if (prices.per_kwh > 0) row.push_back(measured ? fmt::format("{:.4g}", f.cost) : kNone);
      if (prices.co2_grams_per_kwh > 0) {
        row.push_back(measured ? fmt::format("{:.4g}", f.co2_grams) : kNone);
      }
      return row;
    };
    std::vector<std::string> sweeps;
    for (const PartCost& c : report_.costs) sweeps.push_back(c.sweep);
    Section& s = NewSection("What the study cost", StrJoin(sweeps, ", "));
    Table& claims = s.tables.emplace_back();
    claims.id = "cost_claims";
    claims.title = "By claim: the runs its tests read, in any state";
    claims.columns = {"claim"};
    claims.columns.insert(claims.columns.end(), unit_columns.begin(), unit_columns.end());
    for (const ClaimLine& c : report_.claims) {
      std::vector<std::string> row = {c.id};
      for (std::string& cell : cells(c.runs, c.spending)) row.push_back(std::move(cell));
      claims.rows.push_back(std::move(row));
    }
    Table& parts = s.tables.emplace_back();
    parts.id = "cost_parts";
    parts.title = "By part of the study: every run of its sweep";
    parts.columns = {"part (sweep)"};
    parts.columns.insert(parts.columns.end(), unit_columns.begin(), unit_columns.end());
    store::Spending all;
    int64_t all_runs = 0;
    for (const PartCost& c : report_.costs) {
      std::vector<std::string> row = {fmt::format("{} ({})", c.part, c.sweep)};
      for (std::string& cell : cells(c.runs, c.spending)) row.push_back(std::move(cell));
      parts.rows.push_back(std::move(row));
      store::Add(all, c.spending);
      all_runs += c.runs;
    }
    std::vector<std::string> total = {"all"};
    for (std::string& cell : cells(all_runs, all)) total.push_back(std::move(cell));
    parts.rows.push_back(std::move(total));
    s.findings.push_back(StrCat("The whole study: ", store::SpendingLine(all, prices), "."));
    s.findings.push_back(
        "Device-hours run from each attempt's start to its end; energy comes from the workers' "
        "device counters (NVML on a GPU, RAPL on a CPU where the kernel exposes it) and only "
        "where one was read: an attempt without one is counted as not measured, never "
        "estimated. A run read by several claims counts in each; an evaluation counts its own "
        "job, not the training before it.");
    if (prices.per_kwh <= 0 && prices.co2_grams_per_kwh <= 0) {
      s.findings.push_back(
          "No price or carbon intensity is set: cartd's energy_price_per_kwh and "
          "co2_grams_per_kwh, or cart report's --price-per-kwh and --co2-per-kwh.");
    }
  }

  StudySource& source_;
  const ReportOptions& options_;
  std::map<std::string, std::vector<StudyRun>> runs_;  // by sweep
  Report report_;
  std::string ppl_;  // "val_ppl/<set>"
};

}  // namespace

PlotSeries MeanCurve(StudySource& source, const std::vector<const StudyRun*>& runs,
                     const std::string& metric, const std::string& label, absl::Status* error) {
  std::vector<std::vector<store::StepValue>> series;
  for (const StudyRun* r : runs) {
    absl::StatusOr<std::vector<StudyPoint>> pts = source.Series(r->id, metric, kCurvePoints);
    if (!pts.ok()) {
      *error = pts.status();
      return {};
    }
    if (!pts->empty()) series.push_back(std::move(*pts));
  }
  PlotSeries s;
  s.label = label;
  const bool band = runs.size() > 1;
  // The dashboard's group curves draw the same points (store::SeedMeanCurve).
  for (const store::CurvePoint& p : store::SeedMeanCurve(series, kCurvePoints)) {
    s.x.push_back(static_cast<double>(p.step));
    s.y.push_back(p.stats.mean);
    if (band) {
      s.low.push_back(p.min);
      s.high.push_back(p.max);
    }
  }
  return s;
}

const std::vector<std::string>& ClaimTestColumns() {
  static const std::vector<std::string> columns = {
      "test",           "method",    "effect", "low",        "high",      "unit",    "p",
      "p_holm",         "n",         "n2",     "detectable", "published", "verdict", "note",
      "device_classes", "confounded"};
  return columns;
}

std::string FormatStats(const store::CellStats& c, int precision) {
  if (c.n == 0) return kNone;
  if (std::isnan(c.mean)) return "NaN";
  if (c.n == 1) return fmt::format("{:.{}f}", c.mean, precision);
  return fmt::format("{:.{}f} ± {:.{}f} (n = {})", c.mean, precision, (c.ci_high - c.ci_low) / 2,
                     precision, c.n);
}

absl::StatusOr<Report> BuildReport(StudySource& source, const ReportOptions& options) {
  return Builder(source, options).Build();
}

namespace {

// The parts in report order, each with its field: one list for both constnesses.
template <typename Sweeps, typename Field = std::conditional_t<std::is_const_v<Sweeps>,
                                                               const std::string*, std::string*>>
std::vector<std::pair<std::string, Field>> PartsOf(Sweeps& sweeps) {
  return {{"stage1", &sweeps.stage1},
          {"stage2", &sweeps.stage2},
          {"baselines", &sweeps.baselines},
          {"ablations", &sweeps.ablations},
          {"faithfulness", &sweeps.faithfulness},
          {"leak", &sweeps.leak},
          {"variable_r", &sweeps.variable_r}};
}

}  // namespace

std::vector<std::pair<std::string, std::string*>> StudyParts(StudySweeps& sweeps) {
  return PartsOf(sweeps);
}

std::vector<std::pair<std::string, const std::string*>> StudyParts(const StudySweeps& sweeps) {
  return PartsOf(sweeps);
}

absl::Status SetStudyPart(StudySweeps& sweeps, const std::string& part, const std::string& sweep) {
  const std::vector<std::pair<std::string, std::string*>> parts = StudyParts(sweeps);
  auto it =
      std::find_if(parts.begin(), parts.end(), [&](const auto& p) { return p.first == part; });
  if (it == parts.end()) {
    return absl::InvalidArgumentError(
        StrCat("'", part,
               "' is not a part of the study (stage1, stage2, baselines, ablations, "
               "faithfulness, leak, variable_r)"));
  }
  *it->second = sweep;
  return absl::OkStatus();
}

}  // namespace cart::report
