// Runs ONNX backend test data (Debian's libonnx-testdata, or with --root a newer onnx release's, e.g. PyPI onnx 1.17's
// opset 18-22 node tests) through edgetrain and compares with the expected outputs (rtol 1e-3, atol 1e-7, as ONNX's own runner). Prints one summary per suite and
// the unsupported operators. Exits non-zero if a supported case fails or too few node cases pass.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/string_tensor.hpp"
#include "autodiff/onnx_gradient.hpp"
#include "onnx/importer.hpp"
#include "offline/libonnx_proto.hpp"
#include "runtime/session.hpp"

namespace fs = std::filesystem;
using namespace edgetrain;

namespace {

constexpr double kRtol = 1e-3, kAtol = 1e-7;

// Cases whose expected outputs are random draws from numpy: only shape and dtype can be compared.
bool HasRandomOutputs(const std::string& name) {
  for (const char* prefix : {"test_bernoulli", "test_randomuniformlike", "test_randomnormallike"})
    if (name.rfind(prefix, 0) == 0) return true;
  return name.rfind("test_training_dropout", 0) == 0 && name.find("zero_ratio") == std::string::npos;
}

// Cases whose stored model contradicts the outputs stored beside it, with the upstream report; counted
// as "test data that contradicts the model", never as passes.
std::string KnownBadTestData(const std::string& name) {
  if (name == "test_adam_multiple")  // outputs computed with epsilon 1e-2, model omits it (onnx/onnx#7749, fixed by #7763)
    return "the expected outputs use epsilon 1e-2, which the model's Adam node does not set (onnx/onnx#7749)";
  return "";
}

RuntimeValue ReadSequence(const onnx::SequenceProto& seq, const std::string& file) {
  RuntimeValue v;
  v.is_sequence = true;
  for (const auto& t : seq.tensor_values()) v.sequence.push_back(onnx_proto::TensorFromProto(t, ".", file));
  return v;
}

RuntimeValue ReadValue(const fs::path& file, const ValueInfo* info) {
  RuntimeValue v;
  if (info && info->is_optional) {  // an OptionalProto: a tensor, a sequence, or nothing (None)
    auto opt = onnx_proto::ParseFile<onnx::OptionalProto>(file.string(), "optional");
    if (opt.has_sequence_value()) return ReadSequence(opt.sequence_value(), file.string());
    if (opt.has_tensor_value()) v.tensor = onnx_proto::TensorFromProto(opt.tensor_value(), ".", file.string());
    return v;
  }
  if (info && info->is_sequence)
    return ReadSequence(onnx_proto::ParseFile<onnx::SequenceProto>(file.string(), "sequence"), file.string());
  auto proto = onnx_proto::ParseFile<onnx::TensorProto>(file.string(), "tensor");
  // ONNX 1.12 test data stores bfloat16 tensors as their uint16 bit patterns.
  if (info && info->dtype == DataType::kBFloat16 && proto.data_type() == onnx::TensorProto::UINT16)
    proto.set_data_type(onnx::TensorProto::BFLOAT16);
  v.tensor = onnx_proto::TensorFromProto(proto, ".", file.string());
  return v;
}

std::string CompareTensor(const Tensor& expected, const Tensor& actual, bool values) {
  if (expected.dtype() != actual.dtype())
    return "dtype " + DataTypeName(actual.dtype()) + ", expected " + DataTypeName(expected.dtype());
  if (expected.shape() != actual.shape())
    return "shape " + ShapeToString(actual.shape()) + ", expected " + ShapeToString(expected.shape());
  if (!values) return "";
  if (expected.dtype() == DataType::kString) {
    const std::string *e = expected.data<std::string>(), *a = actual.data<std::string>();
    for (int64_t i = 0; i < expected.numel(); ++i)
      if (e[i] != a[i]) return "element " + std::to_string(i) + " is '" + a[i] + "', expected '" + e[i] + "'";
    return "";
  }
  if (IsFloatType(expected.dtype())) {
    // bfloat16 keeps 8 significant bits: ONNX 1.12's data truncates where we round to nearest even.
    double rtol = expected.dtype() == DataType::kBFloat16 ? 1.0 / 128 : kRtol;
    std::vector<double> e = expected.ToDoubleVector(), a = actual.ToDoubleVector();
    for (size_t i = 0; i < e.size(); ++i) {
      if (std::isnan(e[i]) && std::isnan(a[i])) continue;
      if (std::isinf(e[i]) && e[i] == a[i]) continue;
      if (!(std::fabs(e[i] - a[i]) <= kAtol + rtol * std::fabs(e[i])))
        return "element " + std::to_string(i) + " is " + std::to_string(a[i]) + ", expected " + std::to_string(e[i]);
    }
    return "";
  }
  if (std::memcmp(expected.raw(), actual.raw(), expected.nbytes()) != 0) {
    std::vector<int64_t> e = expected.ToInt64Vector(), a = actual.ToInt64Vector();
    for (size_t i = 0; i < e.size(); ++i)
      if (e[i] != a[i])
        return "element " + std::to_string(i) + " is " + std::to_string(a[i]) + ", expected " + std::to_string(e[i]);
  }
  return "";
}

std::string Compare(const RuntimeValue& expected, const RuntimeValue& actual, bool values) {
  if (expected.is_none() || actual.is_none())
    return expected.is_none() == actual.is_none() ? "" : actual.is_none() ? "None, expected a value" : "a value, expected None";
  if (expected.is_sequence != actual.is_sequence) return "sequence/tensor mismatch";
  if (!expected.is_sequence) return CompareTensor(expected.tensor, actual.tensor, values);
  if (expected.sequence.size() != actual.sequence.size())
    return "sequence length " + std::to_string(actual.sequence.size()) + ", expected " +
           std::to_string(expected.sequence.size());
  for (size_t i = 0; i < expected.sequence.size(); ++i) {
    std::string why = CompareTensor(expected.sequence[i], actual.sequence[i], values);
    if (!why.empty()) return "sequence item " + std::to_string(i) + ": " + why;
  }
  return "";
}

enum class Outcome { kPassed, kFailed, kUnsupported, kRandom, kBadData };

// A test input whose shape contradicts the fixed dimensions the model declares (our session
// rightly refuses such a feed), or "" when it fits.
std::string ContradictsDeclaredShape(const ValueInfo& declared, const RuntimeValue& value) {
  if (value.is_sequence || value.is_none() || !declared.has_shape) return "";
  const Shape& shape = value.tensor.shape();
  bool fits = shape.size() == declared.shape.size();
  for (size_t d = 0; fits && d < shape.size(); ++d) fits = !declared.shape[d].known() || declared.shape[d].value == shape[d];
  return fits ? "" : "input '" + declared.name + "' has shape " + ShapeToString(shape) + " in the test data";
}

struct CaseResult {
  Outcome outcome;
  std::string detail;
};

std::vector<fs::path> SortedFiles(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) files.push_back(e.path());
  auto index = [&](const fs::path& p) {
    std::string s = p.stem().string();
    return std::stoi(s.substr(s.find('_') + 1));
  };
  std::sort(files.begin(), files.end(), [&](const fs::path& a, const fs::path& b) { return index(a) < index(b); });
  return files;
}

CaseResult RunCase(const fs::path& dir) {
  std::string name = dir.filename().string();
  if (std::string why = KnownBadTestData(name); !why.empty()) return {Outcome::kBadData, why};
  try {
    // ONNX's Gradient nodes are expanded offline, as artifact generation would (the device never differentiates).
    Model model = LoadModel((dir / "model.onnx").string(), ExecutionImportOptions());
    ExpandOnnxGradientNodes(model);
    Session session(std::move(model));
    const Graph& graph = session.model().graph;
    std::vector<const ValueInfo*> inputs = session.Inputs();
    bool random = HasRandomOutputs(name);
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (!entry.is_directory()) continue;
      std::map<std::string, RuntimeValue> feeds;
      auto input_files = SortedFiles(entry.path(), "input_");
      for (size_t i = 0; i < input_files.size() && i < inputs.size(); ++i) {
        feeds[inputs[i]->name] = ReadValue(input_files[i], inputs[i]);
        std::string bad = ContradictsDeclaredShape(*inputs[i], feeds[inputs[i]->name]);
        if (!bad.empty()) return {Outcome::kBadData, bad + ", which contradicts the model's declared shape"};
      }
      auto output_files = SortedFiles(entry.path(), "output_");
      std::vector<RuntimeValue> actual = session.RunValues(feeds);
      if (actual.size() != output_files.size())
        return {Outcome::kFailed, std::to_string(actual.size()) + " outputs, expected " +
                                      std::to_string(output_files.size())};
      for (size_t i = 0; i < output_files.size(); ++i) {
        std::string why = Compare(ReadValue(output_files[i], &graph.outputs[i]), actual[i], !random);
        if (!why.empty()) return {Outcome::kFailed, "output '" + graph.outputs[i].name + "': " + why};
      }
    }
    return {random ? Outcome::kRandom : Outcome::kPassed, ""};
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotImplemented) return {Outcome::kUnsupported, e.what()};
    return {Outcome::kFailed, std::string(ErrorCodeName(e.code())) + ": " + e.what()};
  } catch (const std::exception& e) {
    return {Outcome::kFailed, std::string("exception: ") + e.what()};
  }
}

// "unsupported operators: Foo-13 (node 'x'), Bar-7 (node 'y')" -> {"Foo", "Bar"}; else the message.
std::set<std::string> UnsupportedReasons(const std::string& message) {
  std::set<std::string> reasons;
  size_t at = message.find("unsupported operators: ");
  if (at == std::string::npos) {  // keep the reason, drop the file and node prefixes
    size_t colon = message.rfind(": ");
    reasons.insert(colon == std::string::npos ? message : message.substr(colon + 2));
    return reasons;
  }
  std::string list = message.substr(at + 23);
  size_t pos = 0;
  while (pos < list.size()) {
    size_t dash = list.find('-', pos), end = list.find("), ", pos);
    reasons.insert(list.substr(pos, dash - pos));
    if (end == std::string::npos) break;
    pos = end + 3;
  }
  return reasons;
}

// The checked-in list of cases that must pass ("suite/case" per line, '#' comments), and of cases whose expected
// outputs we dispute ("!suite/case  # why" lines): those must fail, and are not counted as passing.
std::set<std::string> ReadExpectedPasses(const std::string& path, std::set<std::string>& disputed) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the list of expected passes '" + path + "'");
  std::set<std::string> cases;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '!') disputed.insert(line.substr(1, line.find_first_of(" \t") - 1));
    else cases.insert(line);
  }
  return cases;
}

// Every listed case must pass and every passing case must be listed, so that no case quietly becomes
// unsupported and the list stays exact.
bool MatchesExpectedPasses(const std::set<std::string>& expected, const std::set<std::string>& passed,
                           const std::string& path) {
  bool ok = true;
  for (const auto& c : expected)
    if (!passed.count(c)) {
      std::cout << "REGRESSION " << c << ": listed in " << path << " but does not pass\n";
      ok = false;
    }
  for (const auto& c : passed)
    if (!expected.count(c)) {
      std::cout << "NEW PASS " << c << ": add it to " << path << "\n";
      ok = false;
    }
  return ok;
}

// A filter is one or more substrings separated by '|'; a case matches when its name holds any of them.
bool MatchesFilter(const std::string& name, const std::string& filter) {
  if (filter.empty()) return true;
  for (size_t start = 0;;) {
    const size_t end = filter.find('|', start);
    if (name.find(filter.substr(start, end - start)) != std::string::npos) return true;
    if (end == std::string::npos) return false;
    start = end + 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string root = "/usr/share/libonnx-testdata/data";
  std::string filter;
  bool verbose = false;
  std::string expected_passes_path;
  std::vector<std::string> suites{"node", "pytorch-converted", "pytorch-operator", "simple"};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--root" && i + 1 < argc) root = argv[++i];
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--verbose") verbose = true;
    else if (a == "--expected-passes" && i + 1 < argc) expected_passes_path = argv[++i];
    else if (a == "--suites" && i + 1 < argc) {
      suites.clear();
      std::string list = argv[++i];
      for (size_t pos = 0; pos <= list.size();) {
        size_t comma = std::min(list.find(',', pos), list.size());
        if (comma > pos) suites.push_back(list.substr(pos, comma - pos));
        pos = comma + 1;
      }
    } else {
      std::cerr << "usage: onnx_backend_tests [--root DIR] [--suites node,simple,...] [--filter SUBSTRING[|SUBSTRING...]]"
                   " [--verbose] [--expected-passes FILE]\n";
      return 2;
    }
  }
  if (!fs::exists(root)) {
    std::cerr << "ONNX backend test data not found at " << root
              << " (install libonnx-testdata, or run scripts/setup.sh for the newer onnx's data)\n";
    return 1;
  }
  // With a filter, the list check covers the listed cases the filter selects.
  const bool check_list = !expected_passes_path.empty();
  std::set<std::string> expected_passes, disputed;
  try {
    if (check_list) expected_passes = ReadExpectedPasses(expected_passes_path, disputed);
  } catch (const std::exception& e) {
    std::cout << e.what() << "\n";
    return 1;
  }
  std::erase_if(expected_passes, [&](const std::string& c) { return !MatchesFilter(c.substr(c.find('/') + 1), filter); });
  int total_failed = 0, total_passed = 0;
  std::set<std::string> passed_cases;
  std::map<std::string, int> unsupported_ops;
  for (const std::string& suite : suites) {
    if (!fs::is_directory(fs::path(root) / suite)) {
      std::cerr << "no suite '" << suite << "' in " << root << "\n";
      return 1;
    }
    std::vector<fs::path> cases;
    for (const auto& e : fs::directory_iterator(fs::path(root) / suite))
      if (e.is_directory() && MatchesFilter(e.path().filename().string(), filter))
        cases.push_back(e.path());
    std::sort(cases.begin(), cases.end());
    int passed = 0, failed = 0, unsupported = 0, random = 0, bad_data = 0, disputed_failed = 0;
    for (const auto& dir : cases) {
      CaseResult r = RunCase(dir);
      const std::string id = suite + "/" + dir.filename().string();
      if (disputed.count(id) && r.outcome == Outcome::kPassed) {
        std::cout << "DISPUTED CASE PASSES " << id << ": remove its '!' line from " << expected_passes_path << "\n";
        ++failed;
        continue;
      }
      if (disputed.count(id) && r.outcome == Outcome::kFailed) {
        ++disputed_failed;
        continue;
      }
      const char* label = "PASS";
      switch (r.outcome) {
        case Outcome::kPassed:
          ++passed;
          passed_cases.insert(id);
          break;
        case Outcome::kRandom: ++random; label = "RANDOM"; break;
        case Outcome::kBadData: ++bad_data; label = "BAD-TEST-DATA"; break;
        case Outcome::kFailed: ++failed; label = "FAIL"; break;
        case Outcome::kUnsupported:
          ++unsupported;
          label = "UNSUPPORTED";
          for (const auto& op : UnsupportedReasons(r.detail)) ++unsupported_ops[op];
          break;
      }
      if (verbose || !filter.empty() || r.outcome == Outcome::kFailed || r.outcome == Outcome::kBadData)
        std::cout << label << " " << suite << "/" << dir.filename().string() << (r.detail.empty() ? "" : ": ")
                  << r.detail << "\n";
    }
    std::cout << suite << ": " << passed << " passed, " << failed << " failed, " << unsupported << " unsupported, "
              << random << " random (shape and dtype checked only), " << bad_data
              << " with test data that contradicts the model";
    if (disputed_failed) std::cout << ", " << disputed_failed << " failed with expected outputs we dispute (listed)";
    std::cout << "\n";
    total_failed += failed;
    total_passed += passed;
  }
  if (!unsupported_ops.empty()) {
    std::cout << "unsupported (cases):";
    for (const auto& [op, n] : unsupported_ops) std::cout << " " << op << " (" << n << ")";
    std::cout << "\n";
  }
  bool ok = total_failed == 0;
  if (check_list) ok &= MatchesExpectedPasses(expected_passes, passed_cases, expected_passes_path);
  std::cout << "onnx backend: " << total_passed << " passed, " << total_failed << " failed\n";
  return ok ? 0 : 1;
}
