// Replays ORT's reference sequence (../shared/peers/ort_train_reference.js) through TrainingSession:
// trainStep; 4 x (optimizerStep, lazyResetGrad, trainStep); evalStep; parameter sums. Prints one JSON
// object; tests/ort_compat_test.py compares it with ORT's reference.json.
//   ort_sequence_runner --train F [--eval F] [--optimizer F] --checkpoint F
//                       --input NAME=DTYPE:D0,D1,...:FILE.bin ... [--steps 5] [--lr X] [--save CKPT]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "training/training_session.hpp"

using namespace edgetrain;

namespace {

Tensor ReadRaw(const std::string& spec) {
  size_t eq = spec.find('='), c1 = spec.find(':', eq), c2 = spec.find(':', c1 + 1);
  ET_CHECK(eq != std::string::npos && c1 != std::string::npos && c2 != std::string::npos,
           ErrorCode::kInvalidArgument, "--input '", spec, "' must be NAME=DTYPE:D0,D1:FILE");
  std::string dtype = spec.substr(eq + 1, c1 - eq - 1), dims = spec.substr(c1 + 1, c2 - c1 - 1);
  Shape shape;
  std::stringstream ds(dims);
  for (std::string d; std::getline(ds, d, ',');) shape.push_back(std::stoll(d));
  DataType type = dtype == "float32" ? DataType::kFloat32
                  : dtype == "int64" ? DataType::kInt64
                  : dtype == "int32" ? DataType::kInt32
                                     : DataType::kUndefined;
  ET_CHECK(type != DataType::kUndefined, ErrorCode::kInvalidArgument, "unsupported dtype ", dtype);
  Tensor t(type, shape);
  std::string file = spec.substr(c2 + 1);
  std::ifstream in(file, std::ios::binary);
  in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  ET_CHECK(in.gcount() == static_cast<std::streamsize>(t.nbytes()), ErrorCode::kIoError, "short read of ", file);
  return t;
}

double Sum(const Tensor& buffer) {
  double sum = 0;
  for (float v : buffer.ToVector<float>()) sum += v;
  return sum;
}

double ParameterSum(TrainingSession& session, bool trainable_only) {
  Tensor buffer(DataType::kFloat32, {static_cast<int64_t>(session.GetParametersSize(trainable_only))});
  session.CopyParametersToBuffer(buffer, trainable_only);
  return Sum(buffer);
}

std::string Json(const std::vector<double>& values) {
  std::ostringstream out;
  out.precision(17);
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  return out.str() + "]";
}

}  // namespace

int main(int argc, char** argv) {
  std::string train, eval, optimizer, checkpoint, save;
  std::vector<std::string> input_specs;
  int steps = 5;
  float lr = -1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--train") train = next();
    else if (a == "--eval") eval = next();
    else if (a == "--optimizer") optimizer = next();
    else if (a == "--checkpoint") checkpoint = next();
    else if (a == "--input") input_specs.push_back(next());
    else if (a == "--steps") steps = std::stoi(next());
    else if (a == "--lr") lr = std::stof(next());
    else if (a == "--save") save = next();
    else {
      std::cerr << "unknown argument " << a << "\n";
      return 2;
    }
  }
  try {
    CheckpointState state = CheckpointState::Load(checkpoint);
    TrainingSession session(state, train, eval, optimizer);
    if (lr >= 0) session.SetLearningRate(lr);
    std::vector<Tensor> named;
    std::vector<std::string> names;
    for (const auto& spec : input_specs) {
      names.push_back(spec.substr(0, spec.find('=')));
      named.push_back(ReadRaw(spec));
    }
    auto inputs_for = [&](const std::vector<std::string>& wanted) {
      std::vector<Tensor> inputs;
      for (const auto& w : wanted)
        for (size_t k = 0; k < names.size(); ++k)
          if (names[k] == w) inputs.push_back(named[k]);
      return inputs;
    };
    const double initial_sum = ParameterSum(session, true);
    std::vector<double> losses;
    std::vector<Tensor> train_inputs = inputs_for(session.TrainingInputNames());
    for (int k = 0; k < steps; ++k) {
      if (k > 0) {
        session.OptimizerStep();
        session.LazyResetGrad();
      }
      losses.push_back(session.TrainStep(train_inputs)[0].ToDoubleVector()[0]);
    }
    std::cout.precision(17);
    std::cout << "{\"train_losses\": " << Json(losses);
    if (session.has_eval_model())
      std::cout << ", \"eval_loss\": " << session.EvalStep(inputs_for(session.EvalInputNames()))[0].ToDoubleVector()[0];
    std::cout << ", \"param_sum_initial_trainable\": " << initial_sum
              << ", \"param_sum_final_trainable\": " << ParameterSum(session, true)
              << ", \"param_sum_final_all\": " << ParameterSum(session, false)
              << ", \"params_size_trainable\": " << session.GetParametersSize(true)
              << ", \"params_size_all\": " << session.GetParametersSize(false) << "}" << std::endl;
    if (!save.empty()) CheckpointState::Save(state, save, /*include_optimizer_state=*/true);
  } catch (const Error& e) {
    std::cerr << "error (" << ErrorCodeName(e.code()) << "): " << e.what() << "\n";
    return 1;
  }
  return 0;
}
