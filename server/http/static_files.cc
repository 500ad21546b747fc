// The dashboard's pages and scripts, served from its web directory (docs/dashboard.md).

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/file.h"
#include "common/strings.h"
#include "server/http/dashboard.h"
#include "server/http/internal/api_util.h"

namespace cart::server::http {

using nlohmann::json;

namespace {

std::string ContentTypeOf(const std::filesystem::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".json") return "application/json";
  return "application/octet-stream";
}

}  // namespace

Response Dashboard::Static(const Request& request) {
  namespace fs = std::filesystem;
  if (options_.web_dir.empty()) {
    return Error(absl::StatusCode::kNotFound,
                 "this cartd serves no pages (no web folder); the API is under /api/v1/");
  }
  std::string rel = request.path;
  if (rel == "/" || rel.empty()) rel = "/index.html";
  // Two fixed names for the charting library npm installed beside the pages.
  if (rel == "/vendor/uplot.js") rel = "/node_modules/uplot/dist/uPlot.iife.min.js";
  if (rel == "/vendor/uplot.css") rel = "/node_modules/uplot/dist/uPlot.min.css";
  if (rel.find("..") != std::string::npos || rel.find('\0') != std::string::npos) {
    return Error(absl::StatusCode::kInvalidArgument, "a page path may not contain '..'");
  }
  const bool allowed = rel == "/index.html" || rel.rfind("/static/", 0) == 0 ||
                       rel.rfind("/node_modules/uplot/dist/", 0) == 0;
  if (!allowed) return Error(absl::StatusCode::kNotFound, StrCat("no page ", request.path));
  const fs::path file = fs::path(options_.web_dir) / rel.substr(1);
  std::error_code ec;
  if (rel.back() == '/' || !fs::is_regular_file(file, ec)) {  // a folder is not a page
    return Error(absl::StatusCode::kNotFound, StrCat("no page ", request.path));
  }
  absl::StatusOr<std::string> text = ReadWholeFile(file.string());
  if (!text.ok()) {
    if (rel.rfind("/node_modules/", 0) == 0) {
      return Error(absl::StatusCode::kNotFound,
                   StrCat("the charting library is not installed in ", options_.web_dir,
                          " (run deploy/install-deps.sh, which runs npm ci there)"));
    }
    return Error(absl::StatusCode::kNotFound, StrCat("no page ", request.path));
  }
  Response r;
  r.content_type = ContentTypeOf(file);
  r.body = std::move(*text);
  r.headers.push_back({"Cache-Control", "no-cache"});
  return r;
}

}  // namespace cart::server::http
