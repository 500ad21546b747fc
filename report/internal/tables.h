#pragma once

// The report's table kit: a metric's statistics over the finished runs of a cell, the text of a
// cell, the published figures beside ours, and the pivot (a metric by two config keys) that most
// sections show. What report.cc builds each part's section from.

#include <string>

#include "report/internal/select.h"
#include "report/report.h"
#include "store/results.h"

namespace cart::report::internal {

// What a table shows where there is nothing: no run, no published figure.
inline constexpr char kNone[] = "—";

// Statistics of a metric over the finished runs of a cell.
struct CellValue {
  store::CellStats stats;
  int64_t total = 0;  // runs in the cell, finished or not
};
CellValue Stat(const Runs& runs, const std::string& metric);
// "mean ± half-interval (n = N)" with "(k/total done)" while runs are unfinished; "—" for none.
std::string Text(const CellValue& c, int precision);
// A number at `precision` ("—" for NaN), and the same with its sign.
std::string Num(double v, int precision);
std::string Signed(double v, int precision);
// The cell's mean; NaN when no run finished.
double MeanOrNaN(const CellValue& c);

// The paper's published table `id` (report/paper_figures.yaml); nullptr when it has none.
const PaperTable* Paper(const std::string& id);
// One published cell ("row/col", or a label); NaN when the paper has no such cell.
double PaperCell(const std::string& id, const std::string& key);

// Notes in `s` what is missing or unfinished in a part; false when it has no runs.
bool NoteProgress(Section& s, const Runs& runs, const std::string& what);

// A metric by two config keys: one table of "mean ± 95 % CI", and the published figures (when the
// paper has a table with this id) as their own table with the difference where cells match.
// Fills `heatmap`'s cells when given.
void PivotTables(Section& s, const Runs& runs, const std::string& metric, const std::string& rk,
                 const std::string& ck, const std::string& id, const std::string& title,
                 int precision, Plot* heatmap);

}  // namespace cart::report::internal
