#pragma once

// A one-line progress bar on stderr for long commands (cart data prepare, cart train). It draws
// only when stderr is a terminal, so logs and pipes see plain lines; redraws at most 5 times a
// second. Not thread-safe: one thread updates it.

#include <chrono>
#include <string>

namespace cart::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();  // ends the bar's line when one was drawn

  // Draws "LABEL [=====>    ]  42.0% TEXT"; `fraction` is clamped to [0, 1]. Skipped when the
  // last draw was under 200 ms ago, unless `force`.
  void Update(double fraction, const std::string& text, bool force = false);
  // Erases the bar so that a normal line can be printed; the next Update draws it again.
  void Clear();

  bool enabled() const { return enabled_; }
  double seconds() const;  // since construction

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;  // the bar is on the terminal's current line
  std::chrono::steady_clock::time_point start_, last_;
};

// "1,234,567".
std::string Thousands(int64_t n);
// "42s", "3m07s", "2h05m"; "?" for a negative, NaN or absurd value.
std::string Duration(double seconds);

}  // namespace cart::cli
