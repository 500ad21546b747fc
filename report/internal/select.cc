#include "report/internal/select.h"

#include <set>

#include "store/results.h"

namespace cart::report::internal {

std::string Param(const StudyRun& r, const std::string& key) {
  auto it = r.params.find(key);
  return it == r.params.end() ? std::string() : it->second;
}

std::vector<std::string> Distinct(const Runs& runs, const std::string& key) {
  std::set<std::string> seen;
  for (const StudyRun* r : runs) seen.insert(Param(*r, key));
  return store::SortedValues(seen);
}

Runs Where(const Runs& runs, const std::map<std::string, std::string>& match) {
  Runs out;
  for (const StudyRun* r : runs) {
    bool ok = true;
    for (const auto& [k, v] : match) ok = ok && Param(*r, k) == v;
    if (ok) out.push_back(r);
  }
  return out;
}

bool SameConfigBut(const StudyRun& a, const StudyRun& b, const std::set<std::string>& but) {
  for (const StudyRun* x : {&a, &b}) {
    for (const auto& [k, v] : x->params) {
      if (!but.count(k) && Param(a, k) != Param(b, k)) return false;
    }
  }
  return true;
}

}  // namespace cart::report::internal
