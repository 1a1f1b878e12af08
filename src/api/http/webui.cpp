#include "api/http/webui.h"

#include <string>

#include "api/http/http_server.h"

namespace dgemma {

void add_webui_routes(HttpServer& http) {
  for (const WebAsset& a : web_assets()) {
    auto handler = [a](const HttpRequest&) {
      HttpResponse r;
      r.content_type = a.content_type;
      r.body.assign(reinterpret_cast<const char*>(a.data), a.size);
      r.headers.emplace_back("Cache-Control", "no-cache");
      r.headers.emplace_back("X-Content-Type-Options", "nosniff");
      // Only this server: no CDN, no inline script, nothing from elsewhere.
      r.headers.emplace_back("Content-Security-Policy",
                             "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'");
      return r;
    };
    http.route("GET", std::string("/webui/") + a.name, handler);
    if (std::string(a.name) == "index.html") http.route("GET", "/", handler);
    // Browsers ask for /favicon.ico whatever the page links; the SVG icon answers it too.
    if (std::string(a.name) == "favicon.svg") http.route("GET", "/favicon.ico", handler);
  }
}

}  // namespace dgemma
