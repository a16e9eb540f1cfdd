// The device runtime's ONNX codec (src/onnx/onnx_codec.cpp, nanopb) against libonnx's protobuf: the same
// bytes both ways, and malformed input refused with a typed error before anything is allocated for it.
#include <fstream>
#include <functional>
#include <iterator>

#include "onnx/importer.hpp"
#include "onnx/onnx_messages.hpp"
#include "runtime/session.hpp"
#include "test_util.hpp"

namespace edgetrain {
namespace {

using testing::AddNode;
using testing::AddValue;
using testing::NewModel;
using testing::Serialize;

std::string ReadBytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

// libonnx's serialization, decoded and encoded again by the codec, gives back the same bytes.
void ExpectSameBytes(const std::string& serialized) {
  onnxpb::ModelProto decoded;
  std::string why;
  ASSERT_TRUE(onnxpb::Decode(serialized.data(), serialized.size(), decoded, &why)) << why;
  const std::string encoded = onnxpb::Encode(decoded);
  EXPECT_EQ(encoded.size(), serialized.size());
  EXPECT_TRUE(encoded == serialized);
}

TEST(OnnxCodec, EncodesWhatLibOnnxSerializes) {
  for (const char* model : {"mlp.onnx", "lenet_bn.onnx"}) {
    onnx::ModelProto proto;
    ASSERT_TRUE(proto.ParseFromString(ReadBytes(std::string(EDGETRAIN_MODELS_DIR) + "/" + model))) << model;
    ExpectSameBytes(proto.SerializeAsString());
  }
  onnx::ModelProto m = NewModel();  // every attribute kind, packed and unpacked fields, a subgraph, a function
  auto* g = m.mutable_graph();
  AddValue(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {"batch", "3"});
  AddValue(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {"batch", "3"});
  auto* node = AddNode(g, "Custom", {"x", ""}, {"y"});
  node->set_domain("my.domain");
  auto add = [&](const std::string& name, onnx::AttributeProto::AttributeType type) {
    auto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
  };
  add("f", onnx::AttributeProto::FLOAT)->set_f(-1.5f);
  add("i", onnx::AttributeProto::INT)->set_i(-7);
  add("s", onnx::AttributeProto::STRING)->set_s(std::string("a\0b", 3));
  auto* t = add("t", onnx::AttributeProto::TENSOR)->mutable_t();
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(2);
  t->add_int64_data(-1);
  t->add_int64_data(1LL << 40);
  auto* floats = add("floats", onnx::AttributeProto::FLOATS);
  floats->add_floats(0.25f);
  floats->add_floats(-3.0f);
  auto* ints = add("ints", onnx::AttributeProto::INTS);
  ints->add_ints(-2);
  ints->add_ints(0);
  add("strings", onnx::AttributeProto::STRINGS)->add_strings("x");
  auto* body = add("g", onnx::AttributeProto::GRAPH)->mutable_g();
  AddNode(body, "Identity", {"x"}, {"z"});
  auto* d = t->add_external_data();
  d->set_key("location");
  d->set_value("w.bin");
  auto* f = m.add_functions();
  f->set_name("Custom");
  f->set_domain("my.domain");
  f->add_input("a");
  f->add_output("b");
  f->add_attribute("alpha");
  *f->add_node() = body->node(0);
  auto* imp = f->add_opset_import();
  imp->set_domain("");
  imp->set_version(17);
  ExpectSameBytes(Serialize(m));
}

TEST(OnnxCodec, RefusesTruncatedAndOverlongInput) {
  const std::string bytes = ReadBytes(std::string(EDGETRAIN_MODELS_DIR) + "/mlp.onnx");
  const std::string half = bytes.substr(0, bytes.size() / 2);
  EXPECT_ERROR(LoadModelFromBuffer(half.data(), half.size(), "half.onnx"), ErrorCode::kInvalidModel,
               "'half.onnx' is not a valid ONNX model (truncated or corrupt protobuf)");
  const std::string overlong("\x3a\xff\xff\xff\x0f", 5);  // graph: a 4 GiB length in a 5-byte file
  EXPECT_ERROR(LoadModelFromBuffer(overlong.data(), overlong.size(), "overlong.onnx"), ErrorCode::kInvalidModel,
               "'overlong.onnx' is not a valid ONNX model (truncated or corrupt protobuf)");
}

TEST(OnnxCodec, BoundsNesting) {
  onnx::ModelProto m = NewModel();
  onnx::GraphProto* g = m.mutable_graph();
  for (int level = 0; level < 40; ++level) {  // graph > node > attribute: three messages a level
    auto* a = AddNode(g, "If", {"c"}, {"y"})->add_attribute();
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    g = a->mutable_g();
  }
  const std::string bytes = Serialize(m);
  EXPECT_ERROR(LoadModelFromBuffer(bytes.data(), bytes.size(), "deep.onnx"), ErrorCode::kInvalidModel,
               "'deep.onnx' is not a valid ONNX model (messages nest more than 100 deep)");
}

// ONNX 1.12's shape inference copies raw data by its byte count into a vector sized by the element count: a size
// that is no multiple of the element overflowed it (fuzz_ort_model). Every tensor is refused, named, before it runs.
TEST(OnnxCodec, RawDataOfTheWrongSizeIsRefusedBeforeShapeInference) {
  auto model = [](const std::function<void(onnx::GraphProto*, onnx::TensorProto*)>& place) {
    onnx::ModelProto m = NewModel();
    auto* g = m.mutable_graph();
    AddValue(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {"2", "3"});
    AddValue(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {"6"});
    AddNode(g, "Reshape", {"x", "shape"}, {"y"});
    onnx::TensorProto shape;
    shape.set_name("shape");
    shape.set_data_type(onnx::TensorProto::INT64);
    shape.add_dims(1);
    const int64_t six = 6;
    shape.set_raw_data(std::string(reinterpret_cast<const char*>(&six), 8) + '\x01');  // 9 bytes for one int64
    place(g, &shape);
    return Serialize(m);
  };
  const std::string initializer = model([](onnx::GraphProto* g, onnx::TensorProto* shape) {
    *g->add_initializer() = *shape;
  });
  EXPECT_ERROR(LoadModelFromBuffer(initializer.data(), initializer.size(), "init.onnx", ".", ExecutionImportOptions()),
               ErrorCode::kInvalidModel,
               "initializer 'shape' in init.onnx: has 9 bytes of data but its shape [1] of int64 needs 8");
  const std::string constant = model([](onnx::GraphProto* g, onnx::TensorProto* shape) {
    auto* node = AddNode(g, "Constant", {}, {"shape"});
    node->set_name("c");
    auto* a = node->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() = *shape;
  });
  EXPECT_ERROR(LoadModelFromBuffer(constant.data(), constant.size(), "const.onnx", ".", ExecutionImportOptions()),
               ErrorCode::kInvalidModel,
               "node 'c' (Constant) attribute 'value' in const.onnx: has 9 bytes of data but its shape [1] of int64 "
               "needs 8");
  const std::string nested = model([](onnx::GraphProto* g, onnx::TensorProto* shape) {
    auto* node = AddNode(g, "If", {"flag"}, {"unused"});
    auto* a = node->add_attribute();
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g()->add_initializer() = *shape;
  });
  EXPECT_ERROR(LoadModelFromBuffer(nested.data(), nested.size(), "if.onnx", ".", ExecutionImportOptions()),
               ErrorCode::kInvalidModel,
               "initializer 'shape' in if.onnx: has 9 bytes of data but its shape [1] of int64 needs 8");
  // The same model with 8 bytes loads and runs.
  const std::string good = model([](onnx::GraphProto* g, onnx::TensorProto* shape) {
    shape->mutable_raw_data()->resize(8);
    *g->add_initializer() = *shape;
  });
  Session session(LoadModelFromBuffer(good.data(), good.size(), "good.onnx", ".", ExecutionImportOptions()));
  Tensor x(DataType::kFloat32, {2, 3});
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = static_cast<float>(i);
  const Tensor y = session.Run({{"x", x}}).at(0);
  EXPECT_EQ(y.shape(), (Shape{6}));
  EXPECT_EQ(y.data<float>()[5], 5.0f);
}

}  // namespace
}  // namespace edgetrain
