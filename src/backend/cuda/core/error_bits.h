#pragma once
// Bits of the CUDA backend's device error word (Context::error_host / error_dev): kernels report bad
// input or a failed wait there; the backend checks the word after every synchronisation and throws.

namespace dgemma::cuda {

enum DeviceErrorBits : unsigned {
  kErrEmbedTokenId = 1u,       // embed: a token id outside [0, vocab)
  kErrCollectiveTimeout = 2u,  // the one-device collective: a rank did not arrive within the timeout
  kErrCollectiveAborted = 4u,  // the one-device collective: the group was aborted while this rank waited
};

}  // namespace dgemma::cuda
