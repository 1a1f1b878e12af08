#pragma once
// GET /openapi.json: an OpenAPI 3.1 document of the routes the server registered. Each route's summary,
// request body and answers come from one table here; a route without an entry gets a generic one (a
// unit test keeps the table complete).
#include <string>
#include <utility>
#include <vector>

#include "util/json.h"

namespace dgemma {

// `routes`: (method, path) pairs as HttpServer::routes() lists them ('*' ending a prefix path).
Json openapi_document(const std::vector<std::pair<std::string, std::string>>& routes,
                      const std::string& version);

// True when the table describes the route (method, path).
bool openapi_describes(const std::string& method, const std::string& path);

}  // namespace dgemma
