#pragma once
// A group's collectives recorded and replayed (Collective::capture), checked against the thread
// collective: every rank's gather and bf16 / f32 sums recorded after one op-by-op run of the same work
// (which sizes whatever a collective grows, as the engine runs each step once before recording it),
// then replayed three times on new inputs written into the recorded buffers. Every replay must equal
// the thread collective's results bit for bit.
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/collective.h"
#include "gpu_checks.h"

namespace dgemma::gpu_test {

// fn(k) for every rank k = 0 .. n - 1 at once, each on its own thread; the first rank's exception (by
// rank) is rethrown once all have returned.
void each_rank(int n, const std::function<void(int)>& fn);

// backends[r] is rank r of `group`. Returns the rank replays compared.
int check_recorded_collectives(Reporter& r, const std::string& what, CollectiveGroup& group,
                               const std::vector<Backend*>& backends);

}  // namespace dgemma::gpu_test
