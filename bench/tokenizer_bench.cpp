// Tokenizer throughput: load time, encode MB/s on mixed text (the golden corpus repeated) and on the
// single-word worst cases (one repeated character: BPE sees one 1 MB word), and 256 KB vs 1 MB
// scaling to show encoding is not quadratic. Not part of the CMake build; build and run with:
//   g++ -std=c++20 -O2 -Isrc bench/tokenizer_bench.cpp build/libdgemma_text.a build/libdgemma_util.a \
//       -lfmt -pthread -o build/tokenizer_bench
//   build/tokenizer_bench build/gemma4-tokenizer/tokenizer.json tests/fixtures/tokenizer/corpus.json
#include <ctime>
#include <cstdio>
#include <string>
#include <vector>

#include "text/tokenizer/detokenizer.h"
#include "text/tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/json.h"
#include "util/mmap_file.h"

namespace {

// CPU time of this thread: the development machines are shared, so wall time mostly measures the
// neighbours.
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

std::string repeat_to(const std::string& unit, size_t bytes) {
  std::string s;
  while (s.size() < bytes) s += unit;
  return s;
}

// Best of three runs.
void bench(const dgemma::Tokenizer& tok, const char* name, const std::string& text) {
  double best = 1e30;
  size_t n_ids = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = cpu_now();
    const auto ids = tok.encode(text);
    best = std::min(best, cpu_now() - t0);
    n_ids = ids.size();
  }
  const auto ids = tok.encode(text);
  const double t1 = cpu_now();
  const std::string back = tok.decode(ids);
  const double dec = cpu_now() - t1;
  std::printf("%-34s %7.1f KB  encode %8.2f ms  %7.1f MB/s  (%zu ids)  decode %6.1f MB/s\n", name,
              text.size() / 1024.0, best * 1e3, text.size() / best / 1e6, n_ids, back.size() / dec / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON CORPUS_JSON\n", argv[0]);
    return 2;
  }
  try {
    double t0 = cpu_now();
    auto tok = dgemma::Tokenizer::from_file(argv[1]);
    std::printf("load: %.2f s CPU (vocab %d)\n", cpu_now() - t0, tok->vocab_size());

    const dgemma::Json corpus = dgemma::parse_json(dgemma::read_text_file(argv[2]), argv[2], true);
    std::string mixed_unit;
    for (const auto& s : corpus.at("strings")) mixed_unit += s.get<std::string>() + "\n";

    // Each corpus string on its own (request-sized inputs, no cross-string word cache).
    {
      double best = 1e30;
      size_t bytes = 0;
      for (int rep = 0; rep < 3; ++rep) {
        bytes = 0;
        const double t = cpu_now();
        for (const auto& s : corpus.at("strings")) {
          const std::string& text = s.get_ref<const std::string&>();
          bytes += text.size();
          (void)tok->encode(text, true);
        }
        best = std::min(best, cpu_now() - t);
      }
      std::printf("%-34s %7.1f KB  encode %8.2f ms  %7.1f MB/s\n", "corpus, one string per call", bytes / 1024.0,
                  best * 1e3, bytes / best / 1e6);
    }

    for (size_t kb : {64, 256, 1024}) {
      const size_t bytes = kb * 1024;
      const std::string suffix = " " + std::to_string(kb) + " KB";
      bench(*tok, ("mixed corpus" + suffix).c_str(), repeat_to(mixed_unit, bytes));
      bench(*tok, ("'a' run" + suffix).c_str(), std::string(bytes, 'a'));
      bench(*tok, ("space run" + suffix).c_str(), std::string(bytes, ' '));
      bench(*tok, ("literal U+2581 run" + suffix).c_str(), repeat_to("\xE2\x96\x81", bytes));
      bench(*tok, ("newline run" + suffix).c_str(), std::string(bytes, '\n'));
      bench(*tok, ("'ab' run" + suffix).c_str(), repeat_to("ab", bytes));
      bench(*tok, ("CJK run" + suffix).c_str(), repeat_to("\xE4\xBD\xA0", bytes));
      bench(*tok, ("rare char (byte fallback)" + suffix).c_str(), repeat_to("\xF0\x90\x80\x80", bytes));
    }

    // Streaming decode of the mixed text, one id at a time.
    const auto ids = tok->encode(repeat_to(mixed_unit, 1 << 20));
    dgemma::IncrementalDetokenizer detok(*tok, false);
    t0 = cpu_now();
    size_t out_bytes = 0;
    for (int32_t id : ids) out_bytes += detok.feed_one(id).size();
    out_bytes += detok.flush().size();
    const double s = cpu_now() - t0;
    std::printf("incremental decode, 1 id per call: %.1f M ids/s, %.1f MB/s\n", ids.size() / s / 1e6,
                out_bytes / s / 1e6);
  } catch (const dgemma::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
