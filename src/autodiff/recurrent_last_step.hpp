// An offline rewrite of the forward graph before autodiff (generate-artifacts): the sequence classifier's read
// of a recurrent layer's last time step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace edgetrain {

// Where a Gather reads the last time step of a single-direction RNN/GRU/LSTM's Y (index -1, or the static
// last index; index 0 for direction "reverse"; no sequence_lens), through Squeeze/Unsqueeze/Transpose/Identity
// nodes that nothing else reads, the chain reads Y_h unsqueezed on the time axis instead (a one-step Y) and
// the Gather index 0, so that Y is neither written nor differentiated: PyTorch's `rnn(x)[0][:, -1]`.
// `opset` is the graph's default-domain opset (Unsqueeze's axes are an input from 13); the values in `keep`
// (requested outputs) keep their meaning, as graph outputs do. Returns the count.
size_t ReadLastRecurrentStepFromFinalState(Graph& graph, int64_t opset, const std::vector<std::string>& keep = {});

}  // namespace edgetrain
