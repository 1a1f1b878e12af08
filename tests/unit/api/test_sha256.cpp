// SHA-256 against the FIPS 180-4 / NIST example vectors, incremental updates, and the constant-time
// digest compare used for API keys.
#include <gtest/gtest.h>

#include <string>

#include "api/http/auth.h"
#include "util/error.h"
#include "util/sha256.h"

namespace dgemma {
namespace {

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                       "mnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundaries) {
  // 55, 56 and 64 bytes straddle the length-field boundary of the last block.
  EXPECT_EQ(sha256_hex(std::string(55, 'a')), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(std::string(56, 'a')), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256_hex(std::string(64, 'a')), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256, IncrementalEqualsOneShot) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  for (size_t step : {1u, 3u, 63u, 64u, 65u, 200u}) {
    Sha256 h;
    for (size_t i = 0; i < data.size(); i += step) h.update(std::string_view(data).substr(i, step));
    EXPECT_EQ(to_hex(h.finish()), sha256_hex(data)) << "step " << step;
  }
}

TEST(Sha256, DigestCompare) {
  EXPECT_TRUE(digests_equal(sha256("key"), sha256("key")));
  EXPECT_FALSE(digests_equal(sha256("key"), sha256("kez")));
  Sha256Digest a = sha256("x"), b = a;
  b[31] ^= 1;
  EXPECT_FALSE(digests_equal(a, b));
}

TEST(ApiKeyAuth, KeysAndHeaders) {
  ApiKeyAuth none;
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(none.check_key("anything"));

  ApiKeyAuth auth({"k1", "second"});
  EXPECT_TRUE(auth.enabled());
  EXPECT_TRUE(auth.check_key("k1"));
  EXPECT_TRUE(auth.check_key("second"));
  EXPECT_FALSE(auth.check_key(""));
  EXPECT_FALSE(auth.check_key("k"));
  EXPECT_FALSE(auth.check_key("k1 "));

  HttpRequest r;
  r.headers = {{"authorization", "Bearer k1"}};
  EXPECT_TRUE(auth.check(r));
  r.headers = {{"Authorization", "bearer   second  "}};
  EXPECT_TRUE(auth.check(r));
  r.headers = {{"Authorization", "k1"}};
  EXPECT_FALSE(auth.check(r));
  r.headers = {{"X-Api-Key", "k1"}};
  EXPECT_TRUE(auth.check(r));
  r.headers = {};
  EXPECT_FALSE(auth.check(r));
  EXPECT_THROW(ApiKeyAuth({""}), Error);

  EXPECT_TRUE(ApiKeyAuth::is_protected_path("/v1/chat/completions"));
  EXPECT_TRUE(ApiKeyAuth::is_protected_path("/v1/models"));
  EXPECT_FALSE(ApiKeyAuth::is_protected_path("/health"));
  EXPECT_FALSE(ApiKeyAuth::is_protected_path("/metrics"));
  EXPECT_FALSE(ApiKeyAuth::is_protected_path("/v1x"));
}

}  // namespace
}  // namespace dgemma
