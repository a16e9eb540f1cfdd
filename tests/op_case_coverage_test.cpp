// Coverage of the operator case table: every operator the registry holds (all domains, every opset range)
// has a row in a table of tests/op_case.hpp, runs in the training graph of a gradient row, is run by a case
// of the checked-in ONNX backend pass lists (argv: LIST=ROOT pairs, the list and the test data its cases live
// in), or is named below with the test that checks it instead. Every gradient rule has a float64 gradient row.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gradient_check.hpp"
#include "op_case.hpp"
#include "ops/kernel.hpp"

namespace edgetrain::testing {
namespace {

std::vector<std::pair<std::string, std::string>> g_pass_lists;  // {list file, test data root}

std::string OpKey(const std::string& domain, const std::string& op) { return domain.empty() ? op : domain + ":" + op; }

const std::vector<CaseTable>& Tables() {
  static const std::vector<CaseTable> tables = {
      {"ElementwiseGrad", ElementwiseGradCases},
      {"ActivationGrad", ActivationGradCases},
      {"ReductionGrad", ReductionGradCases},
      {"ShapeGrad", ShapeGradCases},
      {"MatMulConvGrad", MatMulConvGradCases},
      {"NormalizationGrad", NormalizationGradCases},
      {"RecurrentGrad", RecurrentGradCases},
      {"SpectralGrad", SpectralGradCases},
      {"VisionLinalgGrad", VisionLinalgGradCases},
      {"ScanGrad", ScanGradCases},
      {"OrtContrib", OrtContribCases},
      {"OrtGradient", OrtGradientCases},
      {"OrtFused", OrtFusedCases},
      {"OnnxOps", OnnxOpsCases},
      {"StringOps", StringOpsCases},
      {"ConvBackends", ConvBackendCases},
      {"NormBackends", NormBackendCases},
      {"ProductBackends", ProductBackendCases},
  };
  return tables;
}

// Operator keys of the rows of every table that ask for `has`.
std::set<std::string> RowedOps(bool (*has)(const OpCase&)) {
  std::set<std::string> ops;
  for (const CaseTable& table : Tables())
    for (const OpCase& row : table.rows())
      if (has(row)) {
        const OneNode node = row.Node();
        ops.insert(OpKey(node.domain, node.op));
      }
  return ops;
}
bool AnyCheck(const OpCase& row) {
  return HasGradient(row) || HasExpectedValues(row) || HasError(row) || HasBackendCheck(row);
}

// The operators the nodes of every listed backend case run (their model.onnx, top-level graph).
std::set<std::string> NodeCaseOps() {
  std::set<std::string> ops;
  for (const auto& [list, root] : g_pass_lists) {
    std::ifstream in(list);
    EXPECT_TRUE(in) << "cannot read the pass list " << list;
    if (!std::filesystem::is_directory(root)) {
      ADD_FAILURE() << "no ONNX backend test data at " << root << " for " << list << " (scripts/setup.sh installs it)";
      continue;
    }
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#' || line[0] == '!') continue;  // '!': must fail
      const std::filesystem::path model = std::filesystem::path(root) / line / "model.onnx";
      std::ifstream bytes(model, std::ios::binary);
      onnx::ModelProto proto;
      if (!bytes || !proto.ParseFromIstream(&bytes)) {
        ADD_FAILURE() << "cannot read " << model << " (case " << line << " of " << list << ")";
        continue;
      }
      for (const auto& node : proto.graph().node())
        ops.insert(OpKey(node.domain() == "ai.onnx" ? "" : node.domain(), node.op_type()));
    }
  }
  return ops;
}

// The operators of every gradient row's training graph (backward kernels, fused ops and their function bodies):
// the gradient check runs them against central differences.
std::set<std::string> GradientGraphOpsOfAllRows() {
  std::set<std::string> ops;
  for (const CaseTable& table : Tables())
    for (const OpCase& row : table.rows())
      if (HasGradient(row)) ops.merge(GradientGraphOps(row));
  return ops;
}

// Operators without a row or a node case of their own, and the test that checks each.
const std::map<std::string, std::string>& Exemptions() {
  static const std::map<std::string, std::string> exemptions = {
      {"ai.edgetrain:FakeQuantize", "quantize_tests FakeQuantize.*, qat_torch_parity"},
      {"Optional", "an optional-typed value, not a tensor row: onnx_ops_tests OptionalOps.*"},
      {"ai.edgetrain:AdamWUpdate", "the optimizer model's update: gradient_tests OptimizerParity.*, OptimizerModel.*"},
      {"ai.edgetrain:SGDUpdate", "the optimizer model's update: gradient_tests OptimizerParity.*, OptimizerModel.*"},
      {"ai.edgetrain:SGDMomentumUpdate", "the optimizer model's update: gradient_tests OptimizerParity.*"},
  };
  return exemptions;
}

TEST(OpCaseCoverage, RowNamesAreUniquePerOperatorWithinEachTable) {
  for (const CaseTable& table : Tables()) {
    std::set<std::string> names;
    for (const OpCase& row : table.rows()) {
      EXPECT_TRUE(AnyCheck(row)) << table.name << "/" << row.name << " asks for no check";
      EXPECT_TRUE(names.insert(row.Node().op + "/" + row.name).second) << table.name << "/" << row.name << " twice";
    }
  }
}

TEST(OpCaseCoverage, EveryRegisteredOperatorHasARow) {
  ASSERT_FALSE(g_pass_lists.empty()) << "usage: op_case_coverage_tests LIST=ROOT...";
  const std::set<std::string> rowed = RowedOps(AnyCheck), node_cases = NodeCaseOps();
  const std::set<std::string> in_gradient_graphs = GradientGraphOpsOfAllRows();
  std::set<std::string> registered, missing;
  for (const OpKernelEntry& entry : OpRegistry::Global().Entries()) {
    const std::string key = OpKey(entry.domain, entry.op_type);
    registered.insert(key);
    if (!rowed.count(key) && !node_cases.count(key) && !in_gradient_graphs.count(key) && !Exemptions().count(key))
      missing.insert(key);
  }
  std::string list;
  for (const std::string& op : missing) list += op + " ";
  EXPECT_TRUE(missing.empty()) << missing.size() << " registered operators without a row, a listed node case or an "
                               << "exemption (add a row to a table of tests/op_case.hpp): " << list;
  for (const auto& [op, where] : Exemptions()) {
    EXPECT_TRUE(registered.count(op)) << op << " is exempted but not registered";
    EXPECT_FALSE(rowed.count(op)) << op << " is exempted but has a row: drop the exemption";
  }
}

TEST(OpCaseCoverage, EveryGradientRuleHasAFloat64Row) {
  const std::set<std::string> rowed = RowedOps(HasGradient);
  // Rules whose gradient is by definition not the finite difference, and the test that checks each.
  const std::map<std::string, std::string> checked_elsewhere = {
      {"ai.edgetrain:FakeQuantize", "straight-through estimator: quantize_tests FakeQuantize.*, qat_torch_parity"},
  };
  std::set<std::string> missing, ruled;
  for (const OpKernelEntry& entry : OpRegistry::Global().Entries()) {
    if (!entry.gradient) continue;
    const std::string key = OpKey(entry.domain, entry.op_type);
    ruled.insert(key);
    if (!rowed.count(key) && !checked_elsewhere.count(key)) missing.insert(key);
  }
  std::string list;
  for (const std::string& op : missing) list += op + " ";
  EXPECT_TRUE(missing.empty()) << "gradient rules without a float64 row: " << list;
  for (const auto& [op, where] : checked_elsewhere)
    EXPECT_TRUE(ruled.count(op) && !rowed.count(op)) << op << " (" << where << ")";
}

}  // namespace
}  // namespace edgetrain::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) edgetrain::testing::g_pass_lists.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
  }
  return RUN_ALL_TESTS();
}
