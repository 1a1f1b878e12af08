#include "api/openapi.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace dgemma {
namespace {

enum class Body { kNone, kChat, kCompletion, kResponses, kTokenize, kDetokenize, kInvocations };
enum class Answer { kJson, kEmpty, kText, kHtml, kAsset, kJsonOrStream, kMetrics, kNotSupported };

struct Operation {
  const char* method;
  const char* path;  // '*' at the end: any rest (a path parameter, or every file of a folder)
  const char* summary;
  const char* tag;
  bool key;  // needs the API key when one is set
  Body body;
  Answer answer;
};

constexpr Operation kOperations[] = {
    {"GET", "/health", "200 once the model is loaded; 503 while loading or shutting down", "server", false,
     Body::kNone, Answer::kEmpty},
    {"HEAD", "/health", "/health without a body", "server", false, Body::kNone, Answer::kEmpty},
    {"GET", "/ping", "SageMaker health check: /health", "server", false, Body::kNone, Answer::kEmpty},
    {"POST", "/ping", "SageMaker health check: /health", "server", false, Body::kNone, Answer::kEmpty},
    {"GET", "/version", "The server version", "server", false, Body::kNone, Answer::kJson},
    {"GET", "/metrics", "Prometheus metrics (dgemma: and vllm: names)", "server", false, Body::kNone,
     Answer::kMetrics},
    {"GET", "/openapi.json", "This document", "server", false, Body::kNone, Answer::kJson},
    {"GET", "/", "The web page", "web page", false, Body::kNone, Answer::kHtml},
    {"GET", "/favicon.ico", "The web page's icon", "web page", false, Body::kNone, Answer::kAsset},
    {"GET", "/webui/*", "A file of the web page", "web page", false, Body::kNone, Answer::kAsset},
    {"GET", "/v1/models", "The served model names", "models", true, Body::kNone, Answer::kJson},
    {"GET", "/v1/models/*", "One served model", "models", true, Body::kNone, Answer::kJson},
    {"POST", "/v1/chat/completions", "Chat completion, streamed or not", "generation", true, Body::kChat,
     Answer::kJsonOrStream},
    {"POST", "/v1/completions", "Completion of raw prompts, streamed or not", "generation", true,
     Body::kCompletion, Answer::kJsonOrStream},
    {"POST", "/v1/responses", "OpenAI Responses API: a response, streamed or not", "generation", true,
     Body::kResponses, Answer::kJsonOrStream},
    {"GET", "/v1/responses/*", "A stored response", "generation", true, Body::kNone, Answer::kJson},
    {"DELETE", "/v1/responses/*", "Deletes a stored response", "generation", true, Body::kNone,
     Answer::kJson},
    {"POST", "/invocations", "SageMaker: a chat completions or completions body, answered as by that route",
     "generation", true, Body::kInvocations, Answer::kJsonOrStream},
    {"POST", "/tokenize", "Tokens of a prompt or of chat messages", "tokens", false, Body::kTokenize,
     Answer::kJson},
    {"POST", "/detokenize", "Text of token ids", "tokens", false, Body::kDetokenize, Answer::kJson},
    {"POST", "/v1/embeddings", "Not supported (501)", "not supported", true, Body::kNone,
     Answer::kNotSupported},
    {"POST", "/v1/messages", "Not supported (501)", "not supported", true, Body::kNone,
     Answer::kNotSupported},
    {"POST", "/v1/audio/transcriptions", "Not supported (501)", "not supported", true, Body::kNone,
     Answer::kNotSupported},
    {"POST", "/v1/audio/translations", "Not supported (501)", "not supported", true, Body::kNone,
     Answer::kNotSupported},
    {"POST", "/v1/rerank", "Not supported (501)", "not supported", true, Body::kNone, Answer::kNotSupported},
    {"POST", "/v1/score", "Not supported (501)", "not supported", true, Body::kNone, Answer::kNotSupported},
    {"POST", "/pooling", "Not supported (501)", "not supported", false, Body::kNone, Answer::kNotSupported},
    {"POST", "/classify", "Not supported (501)", "not supported", false, Body::kNone, Answer::kNotSupported},
};

const Operation* find_operation(const std::string& method, const std::string& path) {
  for (const auto& op : kOperations) {
    if (method != op.method) continue;
    const std::string_view p = op.path;
    if (p == path) return &op;
    // A folder of files ("/webui/*") describes each file registered under it.
    if (p.back() == '*' && path.back() != '*' && path.size() > p.size() - 1 &&
        path.compare(0, p.size() - 1, p.substr(0, p.size() - 1)) == 0)
      return &op;
  }
  return nullptr;
}

Json ref(const char* name) {
  return Json{{"$ref", std::string("#/components/schemas/") + name}};
}

Json json_content(Json schema) {
  return Json{{"application/json", Json{{"schema", std::move(schema)}}}};
}

Json components() {
  const Json any_object{{"type", "object"}, {"additionalProperties", true}};
  const Json message{{"type", "object"},
                     {"required", Json::array({"role"})},
                     {"properties", Json{{"role", Json{{"type", "string"}}}, {"content", Json::object()}}}};
  auto request = [&](Json required, Json properties) {
    return Json{{"type", "object"},
                {"required", std::move(required)},
                {"properties", std::move(properties)},
                {"additionalProperties", true}};
  };
  const Json sampling{{"model", Json{{"type", "string"}}},
                      {"stream", Json{{"type", "boolean"}}},
                      {"temperature", Json{{"type", "number"}, {"minimum", 0}, {"maximum", 2}}},
                      {"top_p", Json{{"type", "number"}}},
                      {"seed", Json{{"type", "integer"}}},
                      {"max_tokens", Json{{"type", "integer"}, {"minimum", 1}}}};
  Json chat_props = sampling;
  chat_props["messages"] = Json{{"type", "array"}, {"items", message}, {"minItems", 1}};
  chat_props["tools"] = Json{{"type", "array"}, {"items", any_object}};
  Json completion_props = sampling;
  completion_props["prompt"] =
      Json{{"oneOf", Json::array({Json{{"type", "string"}}, Json{{"type", "array"}}})}};
  Json responses_props{
      {"model", Json{{"type", "string"}}},
      {"input", Json{{"oneOf", Json::array({Json{{"type", "string"}}, Json{{"type", "array"}}})}}},
      {"instructions", Json{{"type", "string"}}},
      {"previous_response_id", Json{{"type", "string"}}},
      {"store", Json{{"type", "boolean"}}},
      {"stream", Json{{"type", "boolean"}}},
      {"max_output_tokens", Json{{"type", "integer"}, {"minimum", 1}}},
      {"tools", Json{{"type", "array"}, {"items", any_object}}}};
  Json error{{"type", "object"},
             {"required", Json::array({"error"})},
             {"properties",
              Json{{"error", Json{{"type", "object"},
                                  {"required", Json::array({"message", "type"})},
                                  {"properties",
                                   Json{{"message", Json{{"type", "string"}}},
                                        {"type", Json{{"type", "string"}}},
                                        {"param", Json{{"type", Json::array({"string", "null"})}}},
                                        {"code", Json{{"type", Json::array({"string", "integer"})}}}}}}}}}};
  return Json{{"schemas",
               Json{{"Error", std::move(error)},
                    {"ChatCompletionRequest", request(Json::array({"messages"}), std::move(chat_props))},
                    {"CompletionRequest", request(Json::array({"prompt"}), std::move(completion_props))},
                    {"ResponseCreateRequest", request(Json::array({"input"}), std::move(responses_props))},
                    {"TokenizeRequest",
                     Json{{"type", "object"},
                          {"properties", Json{{"prompt", Json{{"type", "string"}}},
                                              {"messages", Json{{"type", "array"}, {"items", message}}},
                                              {"return_token_strs", Json{{"type", "boolean"}}}}}}},
                    {"DetokenizeRequest",
                     request(Json::array({"tokens"}),
                             Json{{"tokens", Json{{"type", "array"},
                                                  {"items", Json{{"type", "integer"}, {"minimum", 0}}}}}})},
                    {"AnyObject", any_object}}},
              {"securitySchemes",
               Json{{"bearer", Json{{"type", "http"}, {"scheme", "bearer"}}},
                    {"apiKeyHeader", Json{{"type", "apiKey"}, {"in", "header"}, {"name", "X-Api-Key"}}}}}};
}

Json request_body(Body b) {
  const char* schema = nullptr;
  switch (b) {
    case Body::kNone:
      return nullptr;
    case Body::kChat:
      schema = "ChatCompletionRequest";
      break;
    case Body::kCompletion:
      schema = "CompletionRequest";
      break;
    case Body::kResponses:
      schema = "ResponseCreateRequest";
      break;
    case Body::kTokenize:
      schema = "TokenizeRequest";
      break;
    case Body::kDetokenize:
      schema = "DetokenizeRequest";
      break;
    case Body::kInvocations:
      return Json{{"required", true},
                  {"content", json_content(Json{{"oneOf", Json::array({ref("ChatCompletionRequest"),
                                                                       ref("CompletionRequest")})}})}};
  }
  return Json{{"required", true}, {"content", json_content(ref(schema))}};
}

Json answers(Answer a, bool key, bool has_body) {
  Json ok{{"description", "OK"}};
  switch (a) {
    case Answer::kJson:
      ok["content"] = json_content(ref("AnyObject"));
      break;
    case Answer::kEmpty:
      break;
    case Answer::kText:
      ok["content"] = Json{{"text/plain", Json{{"schema", Json{{"type", "string"}}}}}};
      break;
    case Answer::kHtml:
      ok["content"] = Json{{"text/html", Json{{"schema", Json{{"type", "string"}}}}}};
      break;
    case Answer::kAsset:
      ok["content"] = Json{{"*/*", Json{{"schema", Json{{"type", "string"}}}}}};
      break;
    case Answer::kMetrics:
      ok["content"] = Json{{"text/plain", Json{{"schema", Json{{"type", "string"}}}}}};
      break;
    case Answer::kJsonOrStream:
      ok["description"] = "The answer; with \"stream\": true, server-sent events";
      ok["content"] = json_content(ref("AnyObject"));
      ok["content"]["text/event-stream"] = Json{{"schema", Json{{"type", "string"}}}};
      break;
    case Answer::kNotSupported:
      break;
  }
  const Json error{{"description", "Error"}, {"content", json_content(ref("Error"))}};
  Json out = Json::object();
  if (a == Answer::kNotSupported) {
    Json e = error;
    e["description"] = "Not supported by this server";
    out["501"] = std::move(e);
  } else {
    out["200"] = std::move(ok);
  }
  if (has_body)
    out["400"] = Json{{"description", "Invalid request"}, {"content", json_content(ref("Error"))}};
  if (key)
    out["401"] = Json{{"description", "Missing or invalid API key"}, {"content", json_content(ref("Error"))}};
  if (a != Answer::kAsset && a != Answer::kHtml) out["default"] = error;
  return out;
}

// "/v1/models/*" -> "/v1/models/{model}" and its parameter.
std::pair<std::string, Json> templated(const std::string& path) {
  if (path.empty() || path.back() != '*') return {path, nullptr};
  const std::string base = path.substr(0, path.size() - 1);
  const std::string name = base.find("/v1/models/") == 0      ? "model"
                           : base.find("/v1/responses/") == 0 ? "response_id"
                                                              : "name";
  Json param{{"name", name}, {"in", "path"}, {"required", true}, {"schema", Json{{"type", "string"}}}};
  return {base + "{" + name + "}", Json::array({std::move(param)})};
}

}  // namespace

bool openapi_describes(const std::string& method, const std::string& path) {
  return find_operation(method, path) != nullptr;
}

Json openapi_document(const std::vector<std::pair<std::string, std::string>>& routes,
                      const std::string& version) {
  Json paths = Json::object();
  for (const auto& [method, route] : routes) {
    const Operation* op = find_operation(method, route);
    auto [path, params] = templated(route);
    std::string verb = method;
    std::transform(verb.begin(), verb.end(), verb.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string id = verb + path;
    for (char& c : id)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    Json o{{"summary", op ? op->summary : "(undocumented route)"},
           {"operationId", std::move(id)},
           {"tags", Json::array({op ? op->tag : "other"})},
           {"responses",
            answers(op ? op->answer : Answer::kJson, op && op->key, op && op->body != Body::kNone)}};
    if (op && op->body != Body::kNone) o["requestBody"] = request_body(op->body);
    if (op && op->key)
      o["security"] = Json::array({Json{{"bearer", Json::array()}}, Json{{"apiKeyHeader", Json::array()}}});
    if (!params.is_null()) o["parameters"] = std::move(params);
    paths[path][verb] = std::move(o);
  }
  return Json{{"openapi", "3.1.0"},
              {"info", Json{{"title", "dgemma"},
                            {"version", version},
                            {"description",
                             "OpenAI-compatible server for DiffusionGemma (docs/API.md). With --api-key, "
                             "the operations marked with security need the key."}}},
              {"paths", std::move(paths)},
              {"components", components()}};
}

}  // namespace dgemma
