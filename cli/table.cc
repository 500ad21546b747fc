#include "cli/table.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/strings.h"

namespace cart::cli {
namespace {

size_t VisibleWidth(const std::string& s) {
  size_t n = 0, start = 0;
  while (start < s.size()) {
    const size_t escape = s.find('\033', start);  // colour codes take no width
    n += Utf8Length(std::string_view(s).substr(start, escape - start));
    if (escape == std::string::npos) break;
    const size_t m = s.find('m', escape);
    start = m == std::string::npos ? s.size() : m + 1;
  }
  return n;
}

std::string CellText(const cart::v1::TableCell& c, bool with_n) {
  if (!c.text().empty() || c.n() == 0) return c.text().empty() ? "-" : c.text();
  std::string s = fmt::format("{:.4f}", c.mean());
  // ± the half-width of the mean's 95 % interval, as `cart report` and the dashboard write it.
  if (c.n() > 1) s += fmt::format(" ± {:.4f}", (c.ci_high() - c.ci_low()) / 2);
  if (with_n && c.n() > 1) s += fmt::format(" ({})", c.n());
  return s;
}

// Whether any cell is a mean over several runs (and so shows an interval).
bool HasSpread(const cart::v1::Table& table) {
  for (const auto& row : table.rows()) {
    for (const auto& c : row.cells()) {
      if (c.text().empty() && c.n() > 1) return true;
    }
  }
  return false;
}

}  // namespace

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& cells) {
    if (width.size() < cells.size()) width.resize(cells.size(), 0);
    for (size_t i = 0; i < cells.size(); ++i) width[i] = std::max(width[i], VisibleWidth(cells[i]));
  };
  widen(header_);
  for (const auto& r : rows_) widen(r);
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t i = 0; i < cells.size(); ++i) {
      s += cells[i];
      if (i + 1 < cells.size()) s += std::string(width[i] - VisibleWidth(cells[i]) + 2, ' ');
    }
    out << s << "\n";
  };
  if (!header_.empty()) line(header_);
  for (const auto& r : rows_) line(r);
}

void PrintResultTable(const cart::v1::Table& table, const std::string& format, std::ostream& out) {
  if (format == "csv") {
    for (size_t i = 0; i < static_cast<size_t>(table.columns_size()); ++i) {
      out << (i ? "," : "") << CsvField(table.columns(i));
    }
    out << "\n";
    for (const auto& row : table.rows()) {
      for (int i = 0; i < row.cells_size(); ++i) {
        const auto& c = row.cells(i);
        out << (i ? "," : "")
            << (c.n() > 0 && c.text().empty() ? fmt::format("{:.6g}", c.mean())
                                              : CsvField(c.text()));
      }
      out << "\n";
    }
    return;
  }
  if (format == "markdown") {
    out << "| " << fmt::format("{}", fmt::join(table.columns(), " | ")) << " |\n|";
    for (int i = 0; i < table.columns_size(); ++i) out << "---|";
    out << "\n";
    for (const auto& row : table.rows()) {
      out << "|";
      for (const auto& c : row.cells()) out << " " << CellText(c, false) << " |";
      out << "\n";
    }
    return;
  }
  if (!table.title().empty()) out << table.title() << "\n";
  Table t;
  t.Header({table.columns().begin(), table.columns().end()});
  for (const auto& row : table.rows()) {
    std::vector<std::string> cells;
    for (const auto& c : row.cells()) cells.push_back(CellText(c, true));
    t.Row(cells);
  }
  t.Print(out);
  if (HasSpread(table)) {
    out << "(± : half the 95 % confidence interval of the mean over the (n) runs, Student's t)\n";
  }
}

}  // namespace cart::cli
