// /openapi.json: every route the server registers is described, with the document's shape, and
// /metrics carries vLLM's family names beside dgemma's.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "api/api_server.h"
#include "api/http/http_server.h"
#include "api/metrics.h"
#include "api/openapi.h"

namespace dgemma {
namespace {

TEST(OpenApi, EveryRegisteredRouteIsDescribed) {
  HttpServer http(HttpServerOptions{});
  ApiServer api(ApiServerOptions{});
  api.attach(http);
  const auto routes = http.routes();
  ASSERT_GT(routes.size(), 20u);
  for (const auto& [method, path] : routes)
    EXPECT_TRUE(openapi_describes(method, path)) << method << " " << path;

  const Json doc = openapi_document(routes, "1.2.3");
  EXPECT_EQ(doc["openapi"], "3.1.0");
  EXPECT_EQ(doc["info"]["version"], "1.2.3");
  std::set<std::string> ids;
  size_t operations = 0;
  for (const auto& [path, ops] : doc["paths"].items()) {
    EXPECT_EQ(path.find('*'), std::string::npos) << "prefix routes become path templates: " << path;
    for (const auto& [verb, op] : ops.items()) {
      ++operations;
      EXPECT_TRUE(ids.insert(op["operationId"].get<std::string>()).second) << "unique operationId";
      EXPECT_FALSE(op["responses"].empty()) << path;
      EXPECT_NE(op["summary"], "(undocumented route)") << path;
    }
  }
  EXPECT_EQ(operations, routes.size());
  EXPECT_TRUE(doc["paths"]["/v1/responses/{response_id}"].contains("delete"));
  EXPECT_TRUE(doc["paths"]["/health"].contains("head"));
  EXPECT_EQ(doc["paths"]["/v1/models/{model}"]["get"]["parameters"][0]["in"], "path");
  EXPECT_EQ(doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]
               ["schema"]["$ref"],
            "#/components/schemas/ChatCompletionRequest");
  EXPECT_TRUE(doc["paths"]["/v1/chat/completions"]["post"].contains("security"));
  EXPECT_FALSE(doc["paths"]["/health"]["get"].contains("security"));
  EXPECT_FALSE(openapi_describes("GET", "/nowhere"));
}

TEST(Metrics, VllmFamiliesBesideDgemmas) {
  ServerMetrics m("model \"x\"", 1000);
  RequestRecord r;
  r.finished_reason = "stop";
  r.prompt_tokens = 5;
  r.generation_tokens = 3;
  r.e2e_s = 1.5;
  r.ttft_s = 0.5;
  r.prefill_s = 0.25;
  m.on_request_done(r);
  EngineStats stats;
  stats.running = 2;
  stats.waiting = 1;
  stats.kv_usage = 0.25;
  const std::string text = m.render(stats);
  const std::string labels = "{model_name=\"model \\\"x\\\"\",engine=\"0\"}";
  for (const char* prefix : {"dgemma:", "vllm:"}) {
    const std::string p = prefix;
    EXPECT_NE(text.find(p + "num_requests_running" + labels + " 2.0\n"), std::string::npos) << p;
    EXPECT_NE(text.find(p + "num_requests_waiting" + labels + " 1.0\n"), std::string::npos) << p;
    EXPECT_NE(text.find(p + "kv_cache_usage_perc" + labels + " 0.25\n"), std::string::npos) << p;
    EXPECT_NE(text.find(p + "prompt_tokens_total" + labels + " 5.0\n"), std::string::npos) << p;
    EXPECT_NE(text.find(p + "request_prefill_time_seconds_sum" + labels + " 0.25\n"), std::string::npos) << p;
    EXPECT_NE(text.find("# TYPE " + p + "time_to_first_token_seconds histogram\n"), std::string::npos) << p;
    EXPECT_NE(text.find(p + "request_success_total{model_name=\"model "
                            "\\\"x\\\"\",engine=\"0\",finished_reason=\"stop\"} 1.0"),
              std::string::npos)
        << p;
  }
  EXPECT_NE(text.find("vllm:gpu_cache_usage_perc" + labels + " 0.25\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE vllm:lora_requests_info gauge\n"), std::string::npos);
  EXPECT_EQ(text.find("vllm:denoising_steps_per_canvas"), std::string::npos)
      << "dgemma's own stay under dgemma:";
}

}  // namespace
}  // namespace dgemma
