#pragma once
// Bits of the CUDA backend's device error word (Context::error_host / error_dev): kernels report bad
// input there; the backend checks the word after every synchronisation and throws
// (Context::check_error_word).

namespace dgemma::cuda {

enum DeviceErrorBits : unsigned {
  kErrEmbedTokenId = 1u,  // embed: a token id outside [0, vocab)
};

}  // namespace dgemma::cuda
