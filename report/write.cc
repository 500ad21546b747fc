// WriteReport: Markdown (and HTML), one CSV per table, and gnuplot-drawn SVG and PNG plots.

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "common/file.h"
#include "common/process.h"
#include "common/status.h"
#include "common/strings.h"
#include "report/report.h"

namespace cart::report {
namespace {

namespace fs = std::filesystem;

std::string Csv(const Table& t) {
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + CsvField(cells[i]);
    out += "\n";
  };
  line(t.columns);
  for (const auto& row : t.rows) line(row);
  return out;
}

// Markdown cells: a '|' would end the cell.
std::string Md(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '|') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string Html(const std::string& v) {
  std::string out;
  for (char c : v) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The claims and their verdicts as a Markdown table (report.md opens with it; claims.md is it).
std::string ClaimsMarkdown(const Report& r) {
  if (r.claims.empty()) return "";
  std::string out = "| claim (paper) | published | verdict | evidence |\n|---|---|---|---|\n";
  for (const ClaimLine& c : r.claims) {
    out += fmt::format("| {} | {} | **{}**{} | {} |\n", Md(c.claim), Md(c.published), c.verdict,
                       c.confounded ? " (confounded with the device class)" : "", Md(c.evidence));
  }
  return out;
}

// The runs whose attempts trained on more than one card model, beside the claims.
std::string SpanningMarkdown(const Report& r) {
  if (r.spanning_runs.empty()) return "";
  std::string out =
      "Runs whose attempts trained on more than one card model (CUDA does not promise equal "
      "results across models; docs/architecture.md \"Device classes\"):\n\n";
  for (const std::string& run : r.spanning_runs) out += "- " + Md(run) + "\n";
  return out + "\n";
}

// The claims in a sequential design (a seed plan was applied to them), one line each.
std::string LooksMarkdown(const Report& r) {
  std::string out;
  for (const ClaimLine& c : r.claims) {
    if (c.sequential.sequential) out += fmt::format("- `{}`: {}\n", c.id, LookText(c.sequential));
  }
  if (out.empty()) return "";
  return "Claims decided sequentially (seeds were planned for them: each look spends part of the "
         "claim's level by an α-spending boundary, so that looking again after new seeds keeps "
         "the family-wise error at α; docs/study.md \"Planning seeds\"):\n\n" +
         out + "\n";
}

std::string ClaimsCsv(const Report& r) {
  Table t;
  t.columns = {"id",
               "verdict",
               "claim",
               "evidence",
               "section",
               "published",
               "confounded",
               "device_classes",
               "look",
               "look_seeds",
               "seeds_target",
               "alpha_spent",
               "boundary_z",
               "boundary_p",
               "crossed",
               "conditional_power",
               "futile",
               "runs",
               "attempts",
               "device_hours",
               "measured_attempts",
               "energy_kwh"};
  auto num = [](double v) { return std::isnan(v) ? std::string() : fmt::format("{:.6g}", v); };
  for (const ClaimLine& c : r.claims) {
    const SequentialStatus& s = c.sequential;
    std::vector<std::string> row = {c.id,
                                    c.verdict,
                                    c.claim,
                                    c.evidence,
                                    c.section,
                                    c.published,
                                    c.confounded ? "yes" : "",
                                    c.device_classes};
    if (s.sequential) {
      row.insert(row.end(),
                 {StrCat(s.look), s.look_seeds.empty() ? "" : StrCat(s.look_seeds.back()),
                  StrCat(s.seeds_target), num(s.alpha_spent), num(s.boundary), num(s.nominal),
                  s.crossed ? "yes" : "no", num(s.conditional_power), s.futile ? "yes" : ""});
    } else {
      row.resize(t.columns.size() - 5);
    }
    // What the evidence cost (ClaimLine::runs); energy empty when no attempt was measured.
    row.insert(row.end(), {StrCat(c.runs), StrCat(c.spending.attempts),
                           num(c.spending.device_hours), StrCat(c.spending.measured_attempts),
                           c.spending.measured_attempts > 0 ? num(c.spending.energy_j / 3.6e6)
                                                            : std::string()});
    t.rows.push_back(std::move(row));
  }
  return Csv(t);
}

std::string ClaimTestsCsv(const Report& r) {
  Table t;
  t.columns = {"claim"};
  t.columns.insert(t.columns.end(), ClaimTestColumns().begin(), ClaimTestColumns().end());
  for (const ClaimLine& c : r.claims) {
    for (const auto& test : c.tests) {
      std::vector<std::string> row = {c.id};
      row.insert(row.end(), test.begin(), test.end());
      t.rows.push_back(std::move(row));
    }
  }
  return Csv(t);
}

std::string Markdown(const Report& r, bool plots) {
  std::string out = fmt::format("# {}\n\n", r.title);
  out += fmt::format(
      "Built by `cart report` from the results database alone. Cells are the mean over the "
      "finished runs of a config (seeds) ± the half-width of its 95 % Student-t interval, with "
      "n; \"(k/n done)\" marks cells with unfinished runs and "
      "— marks cells with none. Perplexity is on the validation set `{}`. Published figures are "
      "the paper's (arXiv 2606.01495), each table naming where they come from. What each table "
      "answers: docs/study.md.\n\n",
      r.val_set);
  if (!r.claims.empty()) {
    out +=
        "## Claims and verdicts\n\n"
        "Each claim of the paper decided from the finished runs by its rule in the claims file "
        "(docs/study.md): **holds** when the 95 % interval of its effect lies on the claimed side "
        "(or inside the claimed band), **does not hold** when it lies on the other side (or "
        "outside), **cannot tell** otherwise, with the smallest effect the runs could have "
        "detected at 80 % power. p-values are two-sided; Holm's correction runs over each "
        "claim's tests. Every test: [claim_tests.csv](claim_tests.csv).\n\n";
    out += ClaimsMarkdown(r) + "\n" + LooksMarkdown(r) + SpanningMarkdown(r);
  }
  for (const Section& s : r.sections) {
    out += fmt::format("## {}\n\n_Sweep: `{}`_\n\n", s.title, s.sweep);
    for (const std::string& st : s.status) out += fmt::format("> **Not complete:** {}\n\n", st);
    for (const Table& t : s.tables) {
      out += fmt::format("**{}**", t.title);
      if (!t.paper_section.empty()) out += fmt::format(" — published figures: {}", t.paper_section);
      out += fmt::format(" ([CSV](tables/{}.csv))\n\n", t.id);
      out += "|";
      for (const std::string& c : t.columns) out += " " + Md(c) + " |";
      out += "\n|";
      for (size_t i = 0; i < t.columns.size(); ++i) out += i == 0 ? "---|" : "---:|";
      out += "\n";
      for (const auto& row : t.rows) {
        out += "|";
        for (const std::string& c : row) out += " " + Md(c) + " |";
        out += "\n";
      }
      out += "\n";
    }
    for (const std::string& f : s.findings) out += fmt::format("- {}\n", f);
    if (!s.findings.empty()) out += "\n";
    for (const Plot& p : plots ? s.plots : std::vector<Plot>{}) {
      out += fmt::format("![{}](plots/{}.svg)\n\n", p.title, p.id);
    }
  }
  return out;
}

std::string HtmlPage(const Report& r, bool plots) {
  std::string out = fmt::format(
      "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{0}</title><style>"
      "body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}"
      "table{{border-collapse:collapse;margin:.5em 0 1.5em}}td,th{{border:1px solid #ccc;"
      "padding:.2em .6em;text-align:right}}td:first-child,th:first-child{{text-align:left}}"
      ".missing{{background:#fff4e0;padding:.4em .8em;border-left:4px solid #e0a030}}"
      "td.verdict{{font-weight:bold;text-align:center;white-space:nowrap}}"
      ".holds{{background:#dff0d8;color:#2b662b}}.does-not-hold{{background:#f8d7da;"
      "color:#8a1f2b}}.cannot-tell{{background:#eeeeee;color:#555}}"
      "td.evidence{{text-align:left;font-size:.9em}}"
      "img{{max-width:100%}}</style></head><body>\n<h1>{0}</h1>\n"
      "<p>Validation set for perplexity: <code>{1}</code>. Cells: mean ± 95 % CI (Student t) over "
      "finished runs, with n."
      "</p>\n",
      Html(r.title), Html(r.val_set));
  if (!r.claims.empty()) {
    out +=
        "<h2>Claims and verdicts</h2>\n<p>Decided from the finished runs by each claim's rule "
        "(95 % intervals, two-sided p-values, Holm's correction within a claim); every test: "
        "<a href=\"claim_tests.csv\">claim_tests.csv</a>.</p>\n<table><tr><th>claim (paper)</th>"
        "<th>published</th><th>verdict</th><th>evidence</th></tr>\n";
    for (const ClaimLine& c : r.claims) {
      std::string css = c.verdict;
      std::replace(css.begin(), css.end(), ' ', '-');
      out += fmt::format(
          "<tr id=\"claim-{}\"><td>{}</td><td class=\"evidence\">{}</td><td class=\"verdict "
          "{}\">{}</td><td class=\"evidence\">{}</td></tr>\n",
          Html(c.id), Html(c.claim), Html(c.published), css,
          Html(c.confounded ? c.verdict + " (confounded with the device class)" : c.verdict),
          Html(c.evidence));
    }
    out += "</table>\n";
    bool any_look = false;
    for (const ClaimLine& c : r.claims) {
      if (!c.sequential.sequential) continue;
      out += fmt::format("{}<li><code>{}</code>: {}</li>\n",
                         any_look ? ""
                                  : "<p>Decided sequentially (seeds were planned for them; "
                                    "each look spends part of the level):</p><ul>\n",
                         Html(c.id), Html(LookText(c.sequential)));
      any_look = true;
    }
    if (any_look) out += "</ul>\n";
    if (!r.spanning_runs.empty()) {
      out +=
          "<p class=\"missing\">Runs whose attempts trained on more than one card model "
          "(CUDA does not promise equal results across models):</p><ul>";
      for (const std::string& run : r.spanning_runs) out += "<li>" + Html(run) + "</li>";
      out += "</ul>\n";
    }
  }
  for (const Section& s : r.sections) {
    out += fmt::format("<h2>{}</h2><p><em>Sweep: {}</em></p>\n", Html(s.title), Html(s.sweep));
    for (const std::string& st : s.status) {
      out += fmt::format("<p class=\"missing\">Not complete: {}</p>\n", Html(st));
    }
    for (const Table& t : s.tables) {
      out += fmt::format("<p><strong>{}</strong>", Html(t.title));
      if (!t.paper_section.empty()) out += " — published figures: " + Html(t.paper_section);
      out += fmt::format(" (<a href=\"tables/{}.csv\">CSV</a>)</p>\n<table><tr>", Html(t.id));
      for (const std::string& c : t.columns) out += "<th>" + Html(c) + "</th>";
      out += "</tr>\n";
      for (const auto& row : t.rows) {
        out += "<tr>";
        for (const std::string& c : row) out += "<td>" + Html(c) + "</td>";
        out += "</tr>\n";
      }
      out += "</table>\n";
    }
    if (!s.findings.empty()) {
      out += "<ul>";
      for (const std::string& f : s.findings) out += "<li>" + Html(f) + "</li>";
      out += "</ul>\n";
    }
    for (const Plot& p : plots ? s.plots : std::vector<Plot>{}) {
      out +=
          fmt::format("<p><img src=\"plots/{}.svg\" alt=\"{}\"></p>\n", Html(p.id), Html(p.title));
    }
  }
  return out + "</body></html>\n";
}

// gnuplot strings are single-quoted: a quote is doubled.
std::string Gq(const std::string& v) {
  std::string out = "'";
  for (char c : v) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

std::string G(double v) { return std::isnan(v) ? std::string("NaN") : fmt::format("{:.8g}", v); }

// The data file and script of one plot; the script writes NAME.svg and NAME.png.
std::pair<std::string, std::string> PlotFiles(const Plot& p) {
  std::string data, script;
  script += "set encoding utf8\n";
  script += fmt::format("set title {}\nset xlabel {}\nset ylabel {}\n", Gq(p.title), Gq(p.xlabel),
                        Gq(p.ylabel));
  std::string draw;
  if (p.kind == Plot::Kind::kHeatmap) {
    // One line per cell: column index, row index, value; labels on the ticks.
    for (size_t r = 0; r < p.rows.size(); ++r) {
      for (size_t c = 0; c < p.cols.size(); ++c) {
        data += fmt::format("{} {} {}\n", c, r, G(p.values[r][c]));
      }
    }
    std::string xt, yt;
    for (size_t c = 0; c < p.cols.size(); ++c)
      xt += fmt::format("{}{} {}", c ? ", " : "", Gq(p.cols[c]), c);
    for (size_t r = 0; r < p.rows.size(); ++r)
      yt += fmt::format("{}{} {}", r ? ", " : "", Gq(p.rows[r]), r);
    script += fmt::format("set xtics ({})\nset ytics ({})\n", xt, yt);
    script += fmt::format("set xrange [-0.5:{}]\nset yrange [-0.5:{}]\n", p.cols.size() - 0.5,
                          p.rows.size() - 0.5);
    script += "set palette defined (0 '#2c7bb6', 1 '#ffffbf', 2 '#d7191c')\nset cbrange [*:*]\n";
    script += "set view map\nunset key\n";
    draw =
        "plot DATA using 1:2:3 with image, DATA using 1:2:(sprintf('%.4f',$3)) with labels "
        "font ',11'";
  } else {
    script += "set key outside right top\nset grid\n";
    if (p.log_y) script += "set logscale y\n";
    if (p.discrete_x) {
      std::set<double> xs;
      for (const PlotSeries& s : p.series) xs.insert(s.x.begin(), s.x.end());
      std::vector<std::string> tics;
      for (double x : xs) tics.push_back(G(x));
      if (!tics.empty()) {
        script += fmt::format("set xtics ({})\nset xrange [{}:{}]\n", StrJoin(tics, ", "),
                              G(*xs.begin() - 0.5), G(*xs.rbegin() + 0.5));
      }
    }
    std::vector<std::string> parts;
    int block = 0;
    for (size_t k = 0; k < p.series.size(); ++k) {
      const PlotSeries& s = p.series[k];
      if (s.x.empty()) continue;
      const bool band = s.low.size() == s.x.size() && !s.low.empty();
      for (size_t i = 0; i < s.x.size(); ++i) {
        data += band ? fmt::format("{} {} {} {}\n", G(s.x[i]), G(s.y[i]), G(s.low[i]), G(s.high[i]))
                     : fmt::format("{} {}\n", G(s.x[i]), G(s.y[i]));
      }
      data += "\n\n";
      const int color = static_cast<int>(k % 8) + 1;
      if (band) {
        parts.push_back(fmt::format(
            "DATA index {} using 1:3:4 with filledcurves fs transparent solid 0.2 noborder lc {} "
            "notitle",
            block, color));
      }
      parts.push_back(
          fmt::format("DATA index {} using 1:2 with linespoints pt 7 ps 0.4 lw 1.5 lc "
                      "{} title {}",
                      block, color, Gq(s.label)));
      ++block;
    }
    if (parts.empty()) {
      draw = "set label 1 'no data' at graph 0.5, graph 0.5 center\nplot NaN notitle";
    } else {
      draw = "plot " + StrJoin(parts, ", \\\n     ");
    }
  }
  script += fmt::format("DATA = {}\n", Gq(p.id + ".dat"));
  // noenhanced: metric names like task_ppl/lambada are text, not subscripts.
  script += fmt::format(
      "set terminal svg size 900,560 dynamic noenhanced background '#ffffff'\nset output {}\n",
      Gq(p.id + ".svg"));
  script += draw + "\n";
  script += fmt::format("set terminal pngcairo size 900,560 noenhanced\nset output {}\n",
                        Gq(p.id + ".png"));
  script += "replot\nset output\n";
  return {data, script};
}

absl::Status Write(const fs::path& path, const std::string& text) {
  return WriteFileAtomically(path.string(), text);
}

}  // namespace

std::string LookText(const SequentialStatus& s) {
  std::string out = fmt::format(
      "look {}: {} of {} seeds (t = {:.2f}); α spent {:.3g} of {:g}; boundary |z| ≥ {:.2f} "
      "(p < {:.3g}): {}",
      s.look, s.look_seeds.empty() ? 0 : s.look_seeds.back(), s.seeds_target, s.fraction,
      s.alpha_spent, s.alpha, s.boundary, s.nominal, s.crossed ? "crossed" : "not crossed");
  if (!std::isnan(s.conditional_power)) {
    out += fmt::format("; conditional power {:.2f}{}", s.conditional_power,
                       s.futile ? ": stop for futility" : "");
  }
  return out;
}

// Generated from report/paper_figures.yaml (report/CMakeLists.txt).
const char* PaperFiguresYaml();

const std::map<std::string, PaperTable>& PaperFigures() {
  static const std::map<std::string, PaperTable>* figures = [] {
    auto* out = new std::map<std::string, PaperTable>;
    const YAML::Node root = YAML::Load(PaperFiguresYaml());  // checked by report_test
    for (const auto& t : root) {
      PaperTable table;
      table.section = t.second["section"].as<std::string>();
      for (const auto& c : t.second["cells"]) {
        table.cells[c.first.as<std::string>()] = c.second.as<double>();
      }
      (*out)[t.first.as<std::string>()] = std::move(table);
    }
    return out;
  }();
  return *figures;
}

absl::Status WriteReport(const Report& report, const ReportOptions& options) {
  const fs::path out(options.out_dir);
  std::error_code ec;
  fs::create_directories(out / "tables", ec);
  if (ec) return absl::InvalidArgumentError(StrCat(options.out_dir, ": ", ec.message()));
  for (const Section& s : report.sections) {
    for (const Table& t : s.tables) {
      CART_RETURN_IF_ERROR(Write(out / "tables" / (t.id + ".csv"), Csv(t)));
    }
  }
  CART_RETURN_IF_ERROR(Write(out / "claims.md", ClaimsMarkdown(report)));
  CART_RETURN_IF_ERROR(Write(out / "claims.csv", ClaimsCsv(report)));
  CART_RETURN_IF_ERROR(Write(out / "claim_tests.csv", ClaimTestsCsv(report)));
  // The tables first: a report whose plots fail (gnuplot missing or failing) still has them.
  CART_RETURN_IF_ERROR(Write(out / "report.md", Markdown(report, options.plots)));
  if (options.html) {
    CART_RETURN_IF_ERROR(Write(out / "report.html", HtmlPage(report, options.plots)));
  }
  if (options.plots) {
    fs::create_directories(out / "plots", ec);
    if (ec) return absl::InvalidArgumentError(StrCat((out / "plots").string(), ": ", ec.message()));
    std::string all;
    for (const Section& s : report.sections) {
      for (const Plot& p : s.plots) {
        auto [data, script] = PlotFiles(p);
        CART_RETURN_IF_ERROR(Write(out / "plots" / (p.id + ".dat"), data));
        CART_RETURN_IF_ERROR(Write(out / "plots" / (p.id + ".gp"), script));
        all += "load " + Gq(p.id + ".gp") + "\nreset\n";
      }
    }
    if (!all.empty()) {
      CART_RETURN_IF_ERROR(Write(out / "plots" / "all.gp", all));
      // Started without a shell (a quote or a space in --out is only a character of a path),
      // in the plots folder, whose files the scripts load by name.
      const fs::path plots = fs::absolute(out / "plots");
      SpawnOptions spawn;
      spawn.output_path = (plots / "gnuplot.log").string();
      int rc = 127 << 8;  // as a shell reports a program it cannot run
      if (const std::optional<std::string> exe = FindProgram(options.gnuplot)) {
        absl::StatusOr<pid_t> pid = Spawn(
            *exe, {"-e", StrCat("cd ", Gq(plots.string())), (plots / "all.gp").string()}, spawn);
        if (pid.ok() && waitpid(*pid, &rc, 0) != *pid) rc = 127 << 8;
      }
      if (rc != 0) {
        std::ifstream log(out / "plots" / "gnuplot.log");
        std::stringstream text;
        text << log.rdbuf();
        if (WIFEXITED(rc) && WEXITSTATUS(rc) == 127) {
          return absl::FailedPreconditionError(
              StrCat("cannot run '", options.gnuplot,
                     "' to draw the plots: install Debian's gnuplot-nox, or pass --no-plots"));
        }
        return absl::InternalError(StrCat("gnuplot failed (", (out / "plots" / "all.gp").string(),
                                          "): ", text.str().substr(0, 2000)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cart::report
