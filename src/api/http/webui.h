#pragma once
// The web page `dgemma serve` shows at `/`: chat plus the live denoising canvas. Its files
// (src/api/webui/) are compiled into the binary by scripts/embed_webui.cmake; nothing is fetched from
// elsewhere at run time.
#include <cstddef>
#include <vector>

namespace dgemma {

class HttpServer;

struct WebAsset {
  const char* name;          // file name under src/api/webui/
  const char* content_type;
  const unsigned char* data;
  size_t size;
};

// Every embedded file, in name order (generated source).
const std::vector<WebAsset>& web_assets();

// GET / (index.html) and GET /webui/<file>. Public paths, like /health: the page asks for the API key
// itself and sends it on /v1/ requests.
void add_webui_routes(HttpServer& http);

}  // namespace dgemma
