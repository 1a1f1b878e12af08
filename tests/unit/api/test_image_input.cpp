// image_url parts from the request to the engine's prompt images: the parser collects them and renders
// them as image parts, data: URLs decode, file:// URLs only under the allowed directory, network URLs
// and every hostile file are 400s naming the part, and each placeholder expands to boi, N image tokens,
// eoi.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../image/image_encoders.h"
#include "api/openai/image_input.h"
#include "api/openai/openai_request.h"
#include "util/error.h"

namespace dgemma {
namespace {

std::string base64(const std::vector<uint8_t>& b) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < b.size(); i += 3) {
    const uint32_t v = (uint32_t{b[i]} << 16) | (i + 1 < b.size() ? uint32_t{b[i + 1]} << 8 : 0) |
                       (i + 2 < b.size() ? b[i + 2] : 0);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < b.size() ? k[(v >> 6) & 63] : '=';
    out += i + 2 < b.size() ? k[v & 63] : '=';
  }
  return out;
}

std::string png_url(int w, int h) {
  return "data:image/png;base64," + base64(test::encode_png_rgb8(w, h, test::pattern_image(w, h, 3)));
}

ImageSupport support() {
  ImageSupport s;
  s.max_per_prompt = 4;
  s.image_token_id = 300;
  s.boi_token_id = 301;
  s.eoi_token_id = 302;
  s.max_soft_tokens = 70;
  s.max_block_tokens = 1000;
  return s;
}

// The 400 a part gets: its message, checked to name the parameter.
std::string refusal(const std::string& url, const ImageInputPolicy& policy = {}) {
  try {
    load_prompt_images({{url, "messages[0].content[1].image_url.url"}}, policy, support(), std::nullopt);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.param(), "messages[0].content[1].image_url.url");
    return e.what();
  }
  ADD_FAILURE() << "accepted " << url.substr(0, 60);
  return {};
}

RequestPolicy policy() {
  RequestPolicy p;
  p.served_names = {"m"};
  return p;
}

TEST(ImageInput, ChatPartsAreCollectedInOrderAndRenderedAsImageParts) {
  const Json body = Json::parse(R"({"messages": [
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:a"}}, {"type": "text", "text": "hi"}]},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:b", "detail": "auto"}}]}],
    "mm_processor_kwargs": {"max_soft_tokens": 140}})");
  const ParsedRequest r = parse_chat_request(body, policy());
  ASSERT_EQ(r.images.size(), 2u);
  EXPECT_EQ(r.images[0].url, "data:a");
  EXPECT_EQ(r.images[1].param, "messages[1].content[0].image_url.url");
  EXPECT_EQ(r.messages[0]["content"][0], Json::parse(R"({"type": "image"})"));
  EXPECT_EQ(r.messages[0]["content"][1]["text"], "hi");
  EXPECT_EQ(r.max_soft_tokens, 140);
  for (const char* bad : {R"({"type": "image_url"})", R"({"type": "image_url", "image_url": {"url": 5}})"}) {
    Json b = body;
    b["messages"][0]["content"][0] = Json::parse(bad);
    EXPECT_THROW(parse_chat_request(b, policy()), Error) << bad;
  }
  Json b = body;
  b["mm_processor_kwargs"]["max_soft_tokens"] = 100;
  EXPECT_THROW(parse_chat_request(b, policy()), Error);
  b["mm_processor_kwargs"] = Json::parse(R"({"do_resize": false})");
  EXPECT_THROW(parse_chat_request(b, policy()), Error);
}

TEST(ImageInput, DataUrlsDecodeToTheProcessorsPatches) {
  const auto images =
      load_prompt_images({{png_url(48, 48), "p"}, {png_url(96, 48), "q"}}, {}, support(), std::nullopt);
  ASSERT_EQ(images.size(), 2u);
  // 70 soft tokens at most: a square becomes 384 x 384 (8 x 8 cells), 1:2 becomes 240 x 528 (5 x 11).
  EXPECT_EQ(images[0].grid_h, 24);
  EXPECT_EQ(images[0].grid_w, 24);
  EXPECT_EQ(images[1].grid_h, 15);
  EXPECT_EQ(images[1].grid_w, 33);
  EXPECT_EQ(images[0].patches->size(), size_t{24 * 24 * 768});
  EXPECT_NE(images[0].digest, images[1].digest);
  const auto again = load_prompt_images({{png_url(48, 48), "p"}}, {}, support(), std::nullopt);
  EXPECT_EQ(again[0].digest, images[0].digest);
  const auto small = load_prompt_images({{png_url(48, 48), "p"}}, {}, support(), 140);
  EXPECT_EQ(small[0].grid_h, 33);
}

TEST(ImageInput, HostileInputsAreRefusedNamingTheProblem) {
  EXPECT_NE(refusal("https://example.com/a.png").find("network"), std::string::npos);
  EXPECT_NE(refusal("http://127.0.0.1/a.png").find("data: URL"), std::string::npos);
  EXPECT_NE(refusal("ftp://x/a.png").find("data: URL"), std::string::npos);
  EXPECT_NE(refusal("data:image/png;base64,@@@@").find("base64"), std::string::npos);
  EXPECT_NE(refusal("data:image/png,rawbytes").find("base64"), std::string::npos);
  refusal("data:image/png;base64,");
  // Truncated and corrupt files, a text file under an image type, an over-long side, a bomb header.
  const auto png = test::encode_png_rgb8(64, 64, test::pattern_image(64, 64, 3));
  refusal("data:image/png;base64," + base64(std::vector<uint8_t>(png.begin(), png.begin() + png.size() / 2)));
  std::vector<uint8_t> corrupt = png;
  for (size_t i = 40; i < corrupt.size(); i += 7) corrupt[i] ^= 0x5a;
  refusal("data:image/png;base64," + base64(corrupt));
  refusal("data:image/png;base64," + base64(std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o', '!'}));
  ImageInputPolicy tight;
  tight.limits.max_side = 4096;
  tight.limits.max_pixels = 1000000;
  const auto wide = test::encode_png_rgb8(100000, 1, test::pattern_image(100000, 1, 3));
  refusal("data:image/png;base64," + base64(wide), tight);
  const auto big = test::encode_png_rgb8(1200, 1000, test::pattern_image(1200, 1000, 3));
  refusal("data:image/png;base64," + base64(big), tight);
  tight.limits.max_bytes = 1000;
  refusal(png_url(64, 64), tight);
}

TEST(ImageInput, LocalFilesOnlyUnderTheAllowedDirectory) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / fmt::format("dgemma-img-{}", ::getpid());
  fs::create_directories(root / "allowed");
  const auto png = test::encode_png_rgb8(48, 48, test::pattern_image(48, 48, 3));
  for (const fs::path& p : {root / "allowed" / "a.png", root / "secret.png"}) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  }
  fs::create_symlink(root / "secret.png", root / "allowed" / "link.png");
  const std::string inside = "file://" + (root / "allowed" / "a.png").string();
  EXPECT_NE(refusal(inside).find("--allowed-local-media-path"), std::string::npos);
  ImageInputPolicy p;
  p.allowed_local_media_path = (root / "allowed").string();
  EXPECT_EQ(load_prompt_images({{inside, "x"}}, p, support(), std::nullopt).size(), 1u);
  EXPECT_NE(refusal("file://" + (root / "allowed" / ".." / "secret.png").string(), p).find("outside"),
            std::string::npos);
  EXPECT_NE(refusal("file://" + (root / "allowed" / "link.png").string(), p).find("outside"),
            std::string::npos);
  refusal("file://" + (root / "allowed" / "missing.png").string(), p);
  fs::remove_all(root);
}

TEST(ImageInput, ImageCountsAreLimited) {
  ImageSupport none = support();
  none.max_per_prompt = 0;
  EXPECT_THROW(load_prompt_images({{png_url(8, 8), "p"}}, {}, none, std::nullopt), Error);
  ImageSupport one = support();
  one.max_per_prompt = 1;
  EXPECT_THROW(load_prompt_images({{png_url(8, 8), "p"}, {png_url(8, 8), "q"}}, {}, one, std::nullopt),
               Error);
}

TEST(ImageInput, PlaceholdersExpandToBlocks) {
  std::vector<PromptImage> images(2);
  images[0].grid_h = 6;
  images[0].grid_w = 3;  // 2 soft tokens
  images[1].grid_h = 3;
  images[1].grid_w = 9;  // 3
  std::vector<int32_t> tokens = {2, 300, 7, 300, 8};
  expand_image_placeholders(tokens, images, support());
  EXPECT_EQ(tokens, (std::vector<int32_t>{2, 301, 300, 300, 302, 7, 301, 300, 300, 300, 302, 8}));
  EXPECT_EQ(images[0].first, 2);
  EXPECT_EQ(images[1].first, 7);
  std::vector<int32_t> one = {2, 300, 7};
  EXPECT_THROW(expand_image_placeholders(one, images, support()), Error);
}

}  // namespace
}  // namespace dgemma
