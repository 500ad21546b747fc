// A claim's verdict names and the one line of evidence each test gives (report/claims.h).

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "report/claims.h"

namespace cart::report {
namespace {

// Formatted number text with a true minus sign (U+2212), and a plus unless it is a level.
std::string Signed(std::string text, bool level) {
  if (text[0] == '-') {
    text.replace(0, 1, "\u2212");
  } else if (!level) {
    text = "+" + text;
  }
  return text;
}

// A number for reading, signed unless it is a level.
std::string Number(double v, const std::string& unit, bool level = false) {
  if (std::isnan(v)) return "NaN";
  return Signed(unit == "%"         ? fmt::format("{:.2f} %", v)
                : std::abs(v) >= 10 ? fmt::format("{:.2f}", v)
                                    : fmt::format("{:.4f}", v),
                level);
}

std::string PValue(double p) {
  if (std::isnan(p)) return "NaN";
  if (p < 0.001) return fmt::format("{:.1e}", p);
  return fmt::format("{:.3f}", p);
}

}  // namespace

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kHolds:
      return "holds";
    case Verdict::kDoesNotHold:
      return "does not hold";
    case Verdict::kCannotTell:
      return "cannot tell";
  }
  return "cannot tell";
}

std::string Evidence(const TestOutcome& t) {
  if (std::isnan(t.effect) && !t.note.empty()) return fmt::format("{}: {}", t.label, t.note);
  std::string out;
  if (t.method == "Spearman") {
    out = fmt::format("{}: ρ_s = {}, Spearman, n = {}, p = {}", t.label,
                      Signed(fmt::format("{:.3f}", t.effect), false), t.n, PValue(t.p));
  } else {
    out = fmt::format("{}: {}", t.label, Number(t.effect, t.unit, t.level));
    if (!std::isnan(t.low)) {
      out +=
          fmt::format(" [{}, {}]", Number(t.low, t.unit, t.level), Number(t.high, t.unit, t.level));
    }
    out += ", " + t.method;
    out += t.n2 > 0 ? fmt::format(", n = {} + {}", t.n, t.n2) : fmt::format(", n = {}", t.n);
    out += fmt::format(", p = {}", PValue(t.p));
  }
  if (!std::isnan(t.p_holm) && !std::isnan(t.p) && std::abs(t.p_holm - t.p) > 1e-12 &&
      t.p_holm < 1) {
    out += fmt::format(" (Holm {})", PValue(t.p_holm));
  }
  if (!t.note.empty()) out += "; " + t.note;
  if (t.verdict == Verdict::kCannotTell) {
    if (!std::isnan(t.detectable)) {
      out += fmt::format("; detectable at 80 % power: ±{}",
                         t.method == "Spearman" ? fmt::format("{:.3f}", t.detectable)
                                                : Number(t.detectable, t.unit, /*level=*/true));
    }
    if (!std::isnan(t.published)) out += fmt::format("; published {}", Number(t.published, t.unit));
  }
  return out;
}

}  // namespace cart::report
