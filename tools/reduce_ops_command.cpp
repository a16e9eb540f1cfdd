// `edgetrain reduce-ops MODEL...`: the operator config of an operator-reduced build (README, Reduced builds).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "autodiff/agent_models.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "onnx/importer.hpp"
#include "runtime/session.hpp"

namespace fs = std::filesystem;

namespace edgetrain::cli {

namespace {

using OpKey = std::tuple<std::string, std::string, int64_t>;  // domain (ai.onnx for ONNX's), op, opset
using OpUses = std::map<OpKey, std::set<std::string>>;         // -> element types of its inputs and outputs

DataType TypeOf(const std::string& value, const std::vector<const Graph*>& scopes) {
  for (auto g = scopes.rbegin(); g != scopes.rend(); ++g) {
    if (auto it = (*g)->initializers.find(value); it != (*g)->initializers.end()) return it->second.dtype();
    if (const ValueInfo* info = (*g)->FindValueInfo(value); info && info->dtype != DataType::kUndefined)
      return info->dtype;
  }
  return DataType::kUndefined;
}

// Every node of `graph` and of the subgraphs of its If/Loop/Scan nodes.
void CollectOps(const Graph& graph, const Model& model, std::vector<const Graph*>& scopes, OpUses& uses) {
  scopes.push_back(&graph);
  for (const Node& node : graph.nodes) {
    const int64_t opset = node.opset ? node.opset : model.OpsetFor(node.domain);
    std::set<std::string>& types = uses[{node.domain.empty() ? "ai.onnx" : node.domain, node.op_type, opset}];
    for (const auto* values : {&node.inputs, &node.outputs})
      for (const std::string& value : *values)
        if (DataType t = value.empty() ? DataType::kUndefined : TypeOf(value, scopes); t != DataType::kUndefined)
          types.insert(DataTypeName(t));
    for (const auto& [key, attribute] : node.attributes) {
      if (attribute.g) CollectOps(*attribute.g, model, scopes, uses);
      for (const auto& sub : attribute.graphs) CollectOps(*sub, model, scopes, uses);
    }
  }
  scopes.pop_back();
}

// A directory stands for the models in it (an artifact directory: training, eval and optimizer models).
std::vector<std::string> ModelFiles(const std::vector<std::string>& arguments) {
  std::vector<std::string> files;
  for (const std::string& argument : arguments) {
    if (!fs::is_directory(argument)) {
      files.push_back(argument);  // LoadModel names it when it is missing
      continue;
    }
    std::vector<std::string> in_directory;
    for (const auto& entry : fs::directory_iterator(argument))
      if (entry.is_regular_file() && (entry.path().extension() == ".onnx" || entry.path().extension() == ".ort"))
        in_directory.push_back(entry.path().string());
    ET_CHECK(!in_directory.empty(), ErrorCode::kInvalidArgument, "reduce-ops: directory '", argument,
             "' holds no .onnx or .ort model");
    std::sort(in_directory.begin(), in_directory.end());
    files.insert(files.end(), in_directory.begin(), in_directory.end());
  }
  return files;
}

// The model's operators and those its session runs after its passes (FusedGemm, ConvReluMaxPool, ...).
void CollectModelOps(Model model, OpUses& uses) {
  std::vector<const Graph*> scopes;
  CollectOps(model.graph, model, scopes, uses);
  Session session(std::move(model));
  CollectOps(session.model().graph, session.model(), scopes, uses);
}

void ReduceOps(const std::vector<std::string>& arguments, const std::vector<std::string>& agent_models) {
  const std::vector<std::string> files = ModelFiles(arguments);
  OpUses uses;
  for (const std::string& file : files) CollectModelOps(LoadModel(file, ExecutionImportOptions()), uses);
  // A training agent (et_training_agent_create) runs a forward and a backward model built from the model at run time.
  for (const std::string& file : agent_models) {
    AgentModels agent = BuildAgentModels(LoadModel(file, ExecutionImportOptions()));
    CollectModelOps(std::move(agent.forward), uses);
    CollectModelOps(std::move(agent.backward), uses);
  }
  std::cout << "# edgetrain operator config, written by `edgetrain reduce-ops`. A build configured with\n"
               "# -DEDGETRAIN_OPS_CONFIG=<this file> registers and links only these operators (README, Reduced builds).\n"
               "# One operator a line: DOMAIN OP OPSET TYPES. DOMAIN ai.onnx is ONNX's default domain; OPSET is the\n"
               "# domain's opset in the model; TYPES, the element types of the operator's inputs and outputs\n"
               "# (comma-separated, - when none is known): the kernels are compiled for the types that some line lists,\n"
               "# plus float32. '#' starts a comment.\n"
               "# Models:";
  for (const std::string& file : files) std::cout << " " << file;
  for (const std::string& file : agent_models) std::cout << " " << file << " (training agent)";
  std::cout << "\n";
  for (const auto& [key, types] : uses) {
    const auto& [domain, op, opset] = key;
    std::string type_list;
    for (const std::string& t : types) type_list += (type_list.empty() ? "" : ",") + t;
    std::cout << domain << " " << op << " " << opset << " " << (type_list.empty() ? "-" : type_list) << "\n";
  }
}

}  // namespace

void AddReduceOpsCommand(CLI::App& app) {
  auto models = std::make_shared<std::vector<std::string>>();
  auto agent_models = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("reduce-ops",
                                 "Print the operators (domain, op, opset, element types) that models need: the config "
                                 "of a build with -DEDGETRAIN_OPS_CONFIG");
  cmd->add_option("models", *models, "ONNX or .ort models, or artifact directories (every model in them)")
      ->required();
  cmd->add_option("--agent", *agent_models,
                  "Inference models that a training agent (et_training_agent_create) will train on the device");
  cmd->callback([models, agent_models] { ReduceOps(*models, *agent_models); });
}

}  // namespace edgetrain::cli
