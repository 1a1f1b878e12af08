// `dgemma inspect` on a quantised checkpoint: the method, the linear formats and the bytes by dtype.
#include <gtest/gtest.h>

#include <string>

#include "cli/inspect_report.h"

namespace dgemma {
namespace {

const std::string kQuant = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/quant/";

TEST(InspectQuant, ShowsTheFormat) {
  InspectOptions o;
  o.model_dir = kQuant + "tiny_a_nvfp4_modelopt/model";
  const InspectReport r = build_inspect_report(o);
  EXPECT_TRUE(r.validation.ok()) << (r.validation.problems.empty() ? "" : r.validation.problems[0]);
  EXPECT_EQ(r.checkpoint.linear_formats.at("nvfp4"), 12);  // 6 layers x (gate_up, down)
  EXPECT_EQ(r.checkpoint.linear_formats.at("bf16"), 6 * 7 - 2);  // q,k,v,o + 3 MLP; full layers have no v_proj
  EXPECT_EQ(r.bytes_by_dtype.at("U8").tensors, 6 * 8 * 3);
  const std::string text = format_inspect_text(r);
  EXPECT_NE(text.find("modelopt NVFP4"), std::string::npos) << text;
  EXPECT_EQ(inspect_report_json(r)["quantization"]["method"], "modelopt");
}

}  // namespace
}  // namespace dgemma
