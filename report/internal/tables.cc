// The report's table kit (report/internal/tables.h).

#include "report/internal/tables.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "common/strings.h"

namespace cart::report::internal {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

CellValue Stat(const Runs& runs, const std::string& metric) {
  std::vector<double> values;
  for (const StudyRun* r : runs) {
    if (!r->finished) continue;
    auto it = r->values.find(metric);
    if (it != r->values.end()) values.push_back(it->second);
  }
  CellValue c;
  c.stats = store::Summarize(values);
  c.total = static_cast<int64_t>(runs.size());
  return c;
}

std::string Text(const CellValue& c, int precision) {
  if (c.total == 0) return kNone;
  std::string s = FormatStats(c.stats, precision);
  if (c.stats.n < c.total) s += fmt::format(" ({}/{} done)", c.stats.n, c.total);
  return s;
}

std::string Num(double v, int precision) {
  return std::isnan(v) ? std::string(kNone) : fmt::format("{:.{}f}", v, precision);
}

std::string Signed(double v, int precision) {
  return std::isnan(v) ? std::string(kNone) : fmt::format("{:+.{}f}", v, precision);
}

double MeanOrNaN(const CellValue& c) { return c.stats.n > 0 ? c.stats.mean : kNaN; }

const PaperTable* Paper(const std::string& id) {
  auto it = PaperFigures().find(id);
  return it == PaperFigures().end() ? nullptr : &it->second;
}

double PaperCell(const std::string& id, const std::string& key) {
  const PaperTable* t = Paper(id);
  if (t == nullptr) return kNaN;
  auto it = t->cells.find(key);
  return it == t->cells.end() ? kNaN : it->second;
}

bool NoteProgress(Section& s, const Runs& runs, const std::string& what) {
  if (runs.empty()) {
    s.status.push_back(fmt::format("no {} runs in sweep '{}': nothing to show yet", what, s.sweep));
    return false;
  }
  int64_t done = 0;
  for (const StudyRun* r : runs) done += r->finished;
  if (done < static_cast<int64_t>(runs.size())) {
    s.status.push_back(fmt::format("{} of {} {} runs finished; cells use finished runs only", done,
                                   runs.size(), what));
  }
  return true;
}

void PivotTables(Section& s, const Runs& runs, const std::string& metric, const std::string& rk,
                 const std::string& ck, const std::string& id, const std::string& title,
                 int precision, Plot* heatmap) {
  const std::vector<std::string> rows = Distinct(runs, rk), cols = Distinct(runs, ck);
  Table t;
  t.id = id;
  t.title = fmt::format("{} ({}; mean ± 95 % CI over seeds)", title, metric);
  t.columns.push_back(rk + " \\ " + ck);
  for (const std::string& c : cols) t.columns.push_back(ck + "=" + c);
  if (heatmap != nullptr) {
    heatmap->rows = rows;
    heatmap->cols = cols;
    heatmap->xlabel = ck;
    heatmap->ylabel = rk;
  }
  for (const std::string& r : rows) {
    std::vector<std::string> row = {r};
    std::vector<double> hrow;
    for (const std::string& c : cols) {
      const CellValue v = Stat(Where(runs, {{rk, r}, {ck, c}}), metric);
      row.push_back(Text(v, precision));
      hrow.push_back(MeanOrNaN(v));
    }
    t.rows.push_back(std::move(row));
    if (heatmap != nullptr) heatmap->values.push_back(std::move(hrow));
  }
  s.tables.push_back(std::move(t));

  const PaperTable* paper = Paper(id);
  if (paper == nullptr) return;
  std::set<std::string> prow, pcol;
  for (const auto& [key, v] : paper->cells) {
    const std::vector<std::string> parts = Split(key, '/');
    if (parts.size() != 2) continue;
    prow.insert(parts[0]);
    pcol.insert(parts[1]);
  }
  auto by_number = [](std::set<std::string> in) {
    std::vector<std::string> v(in.begin(), in.end());
    std::sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
      return ParseDouble(a).value_or(0) < ParseDouble(b).value_or(0);
    });
    return v;
  };
  Table p;
  p.id = id + "_paper";
  p.title = fmt::format("{}: published (ours − published where the configs match)", title);
  p.paper_section = paper->section;
  p.columns.push_back(rk + " \\ " + ck);
  for (const std::string& c : by_number(pcol)) p.columns.push_back(ck + "=" + c);
  int matched = 0;
  for (const std::string& r : by_number(prow)) {
    std::vector<std::string> row = {r};
    for (const std::string& c : by_number(pcol)) {
      const double pv = PaperCell(id, r + "/" + c);
      const CellValue v = Stat(Where(runs, {{rk, r}, {ck, c}}), metric);
      std::string cell = Num(pv, precision);
      if (v.stats.n > 0 && !std::isnan(pv)) {
        cell += " (" + Signed(v.stats.mean - pv, precision) + ")";
        ++matched;
      }
      row.push_back(cell);
    }
    p.rows.push_back(std::move(row));
  }
  s.tables.push_back(std::move(p));
  if (matched == 0) {
    s.findings.push_back(fmt::format(
        "No {} cell of this study has the paper's config ({} and {} differ), so the published "
        "figures stand as reference only; compare trends, not values.",
        metric, rk, ck));
  }
}

}  // namespace cart::report::internal
