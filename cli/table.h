#pragma once

// Aligned text tables for human output, and the results-table formats (text, CSV, Markdown).

#include <ostream>
#include <string>
#include <vector>

#include "cart/v1/scheduler.pb.h"

namespace cart::cli {

class Table {
 public:
  void Header(std::vector<std::string> cells) { header_ = std::move(cells); }
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  // Columns padded to their widest cell (ANSI colour codes not counted), two spaces apart.
  void Print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// "mean ± std (n)" for aggregated cells, the text for labels; `format`: text, csv or markdown.
void PrintResultTable(const cart::v1::Table& table, const std::string& format, std::ostream& out);

}  // namespace cart::cli
