// String tensors: the Cast formatting/parsing rules, the string operators, their bad inputs, and string data in the
// codec (read and written back byte for byte).
#include <cmath>
#include <limits>

#include <onnx/onnx_pb.h>

#include "autodiff/autodiff.hpp"
#include "onnx/onnx_messages.hpp"
#include "onnx/proto.hpp"
#include "ops/string_ops.hpp"
#include "ort_op_test_util.hpp"

namespace edgetrain {
namespace {

using testing::ExpectRowError;
using testing::OnnxNode;
using testing::OpCase;
using testing::RunOneNode;

Tensor Strings(std::vector<std::string> values, Shape shape) { return Tensor::FromVector(values, std::move(shape)); }

Attribute StringList(std::vector<std::string> values) {
  Attribute a;
  a.kind = Attribute::Kind::kStrings;
  a.strings = std::move(values);
  return a;
}

TEST(StringConvert, NumbersFormatAsTheShortestTextThatReadsBack) {
  EXPECT_EQ(NumberToString(0.9767611f), "0.9767611");
  EXPECT_EQ(NumberToString(0.039187793f), "0.039187793");
  EXPECT_EQ(NumberToString(1e-5f), "1e-05");
  EXPECT_EQ(NumberToString(100.0f), "100");
  EXPECT_EQ(NumberToString(0.1), "0.1");
  EXPECT_EQ(NumberToString(std::numeric_limits<float>::quiet_NaN()), "NaN");
  EXPECT_EQ(NumberToString(std::numeric_limits<double>::infinity()), "INF");
  EXPECT_EQ(NumberToString(-std::numeric_limits<float>::infinity()), "-INF");
  EXPECT_EQ(NumberToString(Float16(0.1f)), "0.1");
  EXPECT_EQ(NumberToString(BFloat16(3.0f)), "3");
  EXPECT_EQ(NumberToString(std::numeric_limits<int64_t>::min()), "-9223372036854775808");
  EXPECT_EQ(NumberToString(uint8_t{255}), "255");
  EXPECT_EQ(NumberToString(true), "1");
  EXPECT_EQ(NumberToString(false), "0");
}

TEST(StringConvert, TextParsesByCastRules) {
  EXPECT_EQ(StringToNumber<float>("0.47892547", "x"), 0.47892547f);
  EXPECT_EQ(StringToNumber<float>("1E8", "x"), 1e8f);
  EXPECT_EQ(StringToNumber<double>(" -2.5e-3 ", "x"), -2.5e-3);
  EXPECT_EQ(StringToNumber<float>("+INF", "x"), std::numeric_limits<float>::infinity());
  EXPECT_EQ(StringToNumber<float>("inf", "x"), std::numeric_limits<float>::infinity());
  EXPECT_EQ(StringToNumber<double>("-Inf", "x"), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(StringToNumber<float>("NaN", "x")));
  EXPECT_TRUE(std::isnan(StringToNumber<double>("nan", "x")));
  EXPECT_EQ(StringToNumber<float>("1e400", "x"), std::numeric_limits<float>::infinity());
  EXPECT_EQ(StringToNumber<float>("+3", "x"), 3.0f);
  EXPECT_EQ(static_cast<float>(StringToNumber<Float16>("0.1", "x")), static_cast<float>(Float16(0.1f)));
  EXPECT_EQ(StringToNumber<int32_t>("100.5", "x"), 100);
  EXPECT_EQ(StringToNumber<int32_t>("-100.7", "x"), -100);
  EXPECT_EQ(StringToNumber<int64_t>("1e3", "x"), 1000);
  EXPECT_EQ(StringToNumber<int64_t>("-9223372036854775808", "x"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(StringToNumber<int64_t>("99999999999999999999", "x"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(StringToNumber<uint8_t>("300", "x"), 255);
  EXPECT_EQ(StringToNumber<uint8_t>("-4", "x"), 0);
  EXPECT_EQ(StringToNumber<int8_t>("+7", "x"), 7);
  EXPECT_EQ(StringToNumber<bool>("true", "x"), true);
  EXPECT_EQ(StringToNumber<bool>("0", "x"), false);
  EXPECT_EQ(StringToNumber<bool>("0.5", "x"), true);
  for (const char* bad : {"", "   ", "abc", "1.5x", "+-1", "--1", "++1", "0x10"}) {
    EXPECT_ERROR(StringToNumber<float>(bad, "node 'n' element 3"), ErrorCode::kInvalidArgument, "node 'n' element 3");
    EXPECT_ERROR(StringToNumber<int32_t>(bad, "element 3"), ErrorCode::kInvalidArgument, "is not a number");
  }
}

TEST(StringTensor, OwnsItsStringsAndCopiesThemOnClone) {
  Tensor words = Strings({"a", "bb", "ccc", ""}, {2, 2});
  EXPECT_EQ(words.numel(), 4);
  EXPECT_EQ(words.nbytes(), 0u);
  Tensor copy = words.Clone();
  words.data<std::string>()[0] = "changed";
  EXPECT_EQ(copy.ToVector<std::string>(), (std::vector<std::string>{"a", "bb", "ccc", ""}));
  Tensor view = words.Reshaped({4});
  EXPECT_EQ(view.data<std::string>()[0], "changed");
  EXPECT_EQ(Tensor::Zeros(DataType::kString, {3}).ToVector<std::string>(), (std::vector<std::string>(3)));
  std::string storage[2];
  EXPECT_ERROR(Tensor::Borrow(DataType::kString, {2}, storage), ErrorCode::kInternal, "cannot borrow");
  EXPECT_ERROR(Tensor(DataType::kString, {kMaxStringElements + 1}, "huge"), ErrorCode::kResourceExhausted,
               "huge: string tensor");
}

onnx::TensorProto WordsProto() {
  onnx::TensorProto proto;
  proto.set_name("words");
  proto.set_data_type(onnx::TensorProto::STRING);
  proto.add_dims(3);
  for (const char* w : {"héllo", "", "a\0b"}) proto.add_string_data(w);
  proto.set_string_data(2, std::string("a\0b", 3));
  return proto;
}

TEST(StringTensor, ReadsStringDataAndWritesTheSameBytesBack) {
  const std::string bytes = WordsProto().SerializeAsString();
  onnxpb::TensorProto decoded;
  std::string why;
  ASSERT_TRUE(onnxpb::Decode(bytes.data(), bytes.size(), decoded, &why)) << why;
  const Tensor t = onnx_proto::TensorFromProto(decoded, ".", "initializer 'words'");
  ASSERT_EQ(t.dtype(), DataType::kString);
  EXPECT_EQ(t.ToVector<std::string>(), (std::vector<std::string>{"héllo", "", std::string("a\0b", 3)}));
  onnxpb::TensorProto written;
  onnx_proto::TensorToProto(t, "words", &written);
  EXPECT_TRUE(onnxpb::Encode(written) == bytes);
}

TEST(StringTensor, MalformedStringDataIsNamed) {
  auto load = [](const onnx::TensorProto& proto) {
    const std::string bytes = proto.SerializeAsString();
    onnxpb::TensorProto decoded;
    if (!onnxpb::Decode(bytes.data(), bytes.size(), decoded)) Fail(ErrorCode::kInvalidModel, "undecodable");
    return onnx_proto::TensorFromProto(decoded, ".", "initializer 'words'");
  };
  onnx::TensorProto too_few = WordsProto();
  too_few.add_dims(2);
  EXPECT_ERROR(load(too_few), ErrorCode::kInvalidModel, "initializer 'words': holds 3 strings but its shape [3, 2] needs 6");
  onnx::TensorProto raw = WordsProto();
  raw.set_raw_data("abc");
  EXPECT_ERROR(load(raw), ErrorCode::kInvalidModel, "initializer 'words': a string tensor keeps its strings in string_data");
  onnx::TensorProto numbers = WordsProto();
  numbers.add_int32_data(1);
  EXPECT_ERROR(load(numbers), ErrorCode::kInvalidModel, "initializer 'words': a string tensor holds numeric data");
  // A string whose length runs past the end of the message is refused by the decoder before it allocates.
  std::string truncated = WordsProto().SerializeAsString();
  truncated.resize(truncated.size() - 2);
  onnxpb::TensorProto decoded;
  EXPECT_FALSE(onnxpb::Decode(truncated.data(), truncated.size(), decoded));
}

TEST(StringOps, CastRoundTripsEveryNumericType) {
  const Tensor x = Tensor::FromVector<double>({0.25, -3, 100, 7.5}, {2, 2});
  for (DataType type : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                        DataType::kInt8, DataType::kInt16, DataType::kInt32, DataType::kInt64, DataType::kUint8,
                        DataType::kUint16, DataType::kUint32, DataType::kUint64, DataType::kBool}) {
    const Tensor typed = RunOneNode(OnnxNode("Cast", {x}, {{"to", Attribute::Int(static_cast<int64_t>(type))}}))[0];
    const Tensor text = RunOneNode(OnnxNode("Cast", {typed}, {{"to", Attribute::Int(8)}}))[0];
    ASSERT_EQ(text.dtype(), DataType::kString) << DataTypeName(type);
    EXPECT_EQ(text.shape(), (Shape{2, 2}));
    const Tensor back = RunOneNode(OnnxNode("CastLike", {text, typed}, {}))[0];
    ASSERT_EQ(back.dtype(), type);
    EXPECT_EQ(back.ToDoubleVector(), typed.ToDoubleVector()) << DataTypeName(type);
  }
  const Tensor text = RunOneNode(OnnxNode("Cast", {Tensor::FromVector<int32_t>({-7, 0}, {2})}, {{"to", Attribute::Int(8)}}))[0];
  EXPECT_EQ(text.ToVector<std::string>(), (std::vector<std::string>{"-7", "0"}));
}

TEST(StringOps, StringNormalizer) {
  const Tensor words = Strings({"Monday", "TUESDAY", "École", "monday"}, {1, 4});
  AttributeMap upper = {{"case_change_action", Attribute::String("UPPER")}, {"stopwords", StringList({"MONDAY"})}};
  EXPECT_EQ(RunOneNode(OnnxNode("StringNormalizer", {words}, upper))[0].ToVector<std::string>(),
            (std::vector<std::string>{"TUESDAY", "ÉCOLE"}));
  AttributeMap lower = {{"case_change_action", Attribute::String("LOWER")}, {"is_case_sensitive", Attribute::Int(1)},
                        {"stopwords", StringList({"monday"})}, {"locale", Attribute::String("en_US")}};
  const Tensor y = RunOneNode(OnnxNode("StringNormalizer", {words}, lower))[0];
  EXPECT_EQ(y.shape(), (Shape{1, 3}));
  EXPECT_EQ(y.ToVector<std::string>(), (std::vector<std::string>{"monday", "tuesday", "école"}));
  const Tensor none = RunOneNode(OnnxNode("StringNormalizer", {Strings({"a", "A"}, {2})}, {{"stopwords", StringList({"a"})}}))[0];
  EXPECT_EQ(none.shape(), (Shape{1}));
  EXPECT_EQ(none.ToVector<std::string>(), (std::vector<std::string>{""}));
}

TEST(StringOps, TfIdfVectorizerCountsStringsInEveryMode) {
  // pool: unigrams {a, b}, bigrams {(a, b)}; output columns 2, 0, 1.
  auto run = [](const Tensor& text, const std::string& mode, int64_t skip) {
    AttributeMap a = {{"min_gram_length", Attribute::Int(1)}, {"max_gram_length", Attribute::Int(2)},
                      {"max_skip_count", Attribute::Int(skip)}, {"mode", Attribute::String(mode)},
                      {"ngram_counts", Attribute::Ints({0, 2})}, {"ngram_indexes", Attribute::Ints({2, 0, 1})},
                      {"pool_strings", StringList({"a", "b", "a", "b"})}, {"weights", Attribute::Floats({0.5f, 2, 4})}};
    return RunOneNode(OnnxNode("TfIdfVectorizer", {text}, a))[0].ToVector<float>();
  };
  // Row 0 "a b a": a x2, b x1, (a,b) x1; row 1 "c b x": b x1.
  const Tensor rows = Strings({"a", "b", "a", "c", "b", "x"}, {2, 3});
  EXPECT_EQ(run(rows, "TF", 0), (std::vector<float>{1, 1, 2, 1, 0, 0}));
  EXPECT_EQ(run(rows, "IDF", 0), (std::vector<float>{2, 4, 0.5f, 2, 0, 0}));
  EXPECT_EQ(run(rows, "TFIDF", 0), (std::vector<float>{2, 4, 1, 2, 0, 0}));
  // "a x b": the bigram (a, b) is two apart, so only a skip of 1 finds it; unigrams are counted once.
  const Tensor spread = Strings({"a", "x", "b"}, {3});
  EXPECT_EQ(run(spread, "TF", 0), (std::vector<float>{1, 0, 1}));
  EXPECT_EQ(run(spread, "TF", 1), (std::vector<float>{1, 1, 1}));
}

TEST(StringOps, Opset20StringOperators) {
  const Tensor a = Strings({"ab", "c"}, {2}), s = Strings({"!"}, {});
  AttributeMap none;
  EXPECT_EQ(RunOneNode(OnnxNode("StringConcat", {a, s}, none, 1, 20))[0].ToVector<std::string>(),
            (std::vector<std::string>{"ab!", "c!"}));
  const auto split = RunOneNode(OnnxNode("StringSplit", {Strings({"a,b,,c", "", "x"}, {3})},
                                         {{"delimiter", Attribute::String(",")}, {"maxsplit", Attribute::Int(2)}}, 2, 20));
  EXPECT_EQ(split[0].shape(), (Shape{3, 3}));
  EXPECT_EQ(split[0].ToVector<std::string>(), (std::vector<std::string>{"a", "b", ",c", "", "", "", "x", "", ""}));
  EXPECT_EQ(split[1].ToVector<int64_t>(), (std::vector<int64_t>{3, 1, 1}));
  const auto words = RunOneNode(OnnxNode("StringSplit", {Strings({"  one two  three ", "   "}, {2})}, none, 2, 20));
  EXPECT_EQ(words[0].ToVector<std::string>(), (std::vector<std::string>{"one", "two", "three", "", "", ""}));
  EXPECT_EQ(words[1].ToVector<int64_t>(), (std::vector<int64_t>{3, 0}));
  const Tensor match = RunOneNode(OnnxNode("RegexFullMatch", {Strings({"ab12", "ab", "xab12"}, {3})},
                                           {{"pattern", Attribute::String("ab\\d+")}}, 1, 20))[0];
  EXPECT_EQ(match.ToVector<bool>(), (std::vector<bool>{true, false, false}));
  const Tensor equal = RunOneNode(OnnxNode("Equal", {a, Strings({"c"}, {1})}, none, 1, 19))[0];
  EXPECT_EQ(equal.ToVector<bool>(), (std::vector<bool>{false, true}));
}

// The second run uses the memory plan the first one measured: string outputs stay out of the arena.
TEST(StringOps, StringOutputsSurviveThePlannedRun) {
  const testing::OneNode cast = OnnxNode("Cast", {Tensor::FromVector<float>({1.5f, -2}, {2})}, {{"to", Attribute::Int(8)}});
  Session session(testing::OneNodeModel(cast));
  for (int run = 0; run < 3; ++run) {
    const auto out = session.RunValues(testing::OneNodeFeeds(cast.inputs));
    ASSERT_EQ(out[0].tensor.dtype(), DataType::kString);
    EXPECT_EQ(out[0].tensor.ToVector<std::string>(), (std::vector<std::string>{"1.5", "-2"})) << "run " << run;
  }
}

std::vector<OpCase> BadStringRows() {
  const Tensor words = Strings({"a", "b"}, {2});
  const Tensor numbers = Tensor::FromVector<float>({1, 2}, {2});
  AttributeMap tfidf = {{"min_gram_length", Attribute::Int(1)}, {"max_gram_length", Attribute::Int(1)},
                        {"max_skip_count", Attribute::Int(0)}, {"mode", Attribute::String("TF")},
                        {"ngram_counts", Attribute::Ints({0})}, {"ngram_indexes", Attribute::Ints({0, 1})},
                        {"pool_strings", StringList({"a", "b"})}};
  AttributeMap bad_counts = tfidf;
  bad_counts["ngram_counts"] = Attribute::Ints({0, 1});
  bad_counts["max_gram_length"] = Attribute::Int(2);
  AttributeMap bad_mode = tfidf;
  bad_mode["mode"] = Attribute::String("BM25");
  AttributeMap int_pool = tfidf;
  int_pool.erase("pool_strings");
  int_pool["pool_int64s"] = Attribute::Ints({1, 2});
  return {
      {"CastNotANumber", OnnxNode("Cast", {Strings({"1.5", "Hello"}, {2})}, {{"to", Attribute::Int(1)}}),
       ErrorCode::kInvalidArgument, "element 1 of the string input: 'Hello' is not a number"},
      {"StringIntoAdd", OnnxNode("Add", {words, words}, {}), ErrorCode::kNotImplemented,
       "input 0 ('in0') is a string tensor, which this operator does not accept"},
      {"NumberIntoStringNormalizer", OnnxNode("StringNormalizer", {numbers}, {}), ErrorCode::kInvalidArgument,
       "must be a string tensor, got float32"},
      {"UnknownLocale", OnnxNode("StringNormalizer", {words}, {{"locale", Attribute::String("tr_TR")}}),
       ErrorCode::kNotImplemented, "locale 'tr_TR' is not supported"},
      {"BadCaseAction", OnnxNode("StringNormalizer", {words}, {{"case_change_action", Attribute::String("TITLE")}}),
       ErrorCode::kInvalidModel, "'case_change_action' is 'TITLE'"},
      {"StringNormalizerRank3", OnnxNode("StringNormalizer", {Strings({"a"}, {1, 1, 1})}, {}),
       ErrorCode::kInvalidArgument, "must have shape [C] or [1, C]"},
      {"TfIdfBadCounts", OnnxNode("TfIdfVectorizer", {words}, bad_counts), ErrorCode::kInvalidModel,
       "does not split a pool of 2 items into 2-grams"},
      {"TfIdfBadMode", OnnxNode("TfIdfVectorizer", {words}, bad_mode), ErrorCode::kInvalidModel, "'mode' is 'BM25'"},
      {"TfIdfMissingAttribute", OnnxNode("TfIdfVectorizer", {words}, {}), ErrorCode::kInvalidModel,
       "attribute 'max_gram_length' is required"},
      {"TfIdfStringsWithIntPool", OnnxNode("TfIdfVectorizer", {words}, int_pool), ErrorCode::kInvalidArgument,
       "needs the attribute 'pool_strings'"},
      {"TfIdfFloatInput", OnnxNode("TfIdfVectorizer", {numbers}, int_pool), ErrorCode::kInvalidArgument,
       "must be int32, int64 or string, got float32"},
      {"SplitNegativeMax", OnnxNode("StringSplit", {words}, {{"maxsplit", Attribute::Int(-2)}}, 2, 20),
       ErrorCode::kInvalidModel, "'maxsplit' is -2"},
      {"BadRegex", OnnxNode("RegexFullMatch", {words}, {{"pattern", Attribute::String("(ab")}}, 1, 20),
       ErrorCode::kInvalidModel, "is not a valid regular expression"},
      {"ConcatNumber", OnnxNode("StringConcat", {words, numbers}, {}, 1, 20), ErrorCode::kInvalidArgument,
       "input 1 ('in1') must be a string tensor"},
  };
}

class BadStringInput : public ::testing::TestWithParam<OpCase> {};
TEST_P(BadStringInput, IsATypedErrorNamingTheNode) { ExpectRowError(GetParam()); }
INSTANTIATE_TEST_SUITE_P(StringOps, BadStringInput,
                         ::testing::ValuesIn(testing::RowsWith({testing::StringOpsCases}, testing::HasError)),
                         testing::RowName());

TEST(StringOps, DifferentiatingThroughAStringIsATypedError) {
  Graph g;
  g.inputs.push_back(testing::ValueInfoOf("w", DataType::kFloat32, {2}));
  auto add = [&](const std::string& op, std::vector<std::string> in, const std::string& out, AttributeMap a = {}) {
    Node n;
    n.name = out + "_node";
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {out};
    n.attributes = std::move(a);
    g.nodes.push_back(n);
  };
  add("Cast", {"w"}, "text", {{"to", Attribute::Int(8)}});
  add("Cast", {"text"}, "back", {{"to", Attribute::Int(1)}});
  add("ReduceSum", {"back"}, "loss");
  g.outputs.push_back(testing::ValueInfoOf("loss", DataType::kFloat32, {}));
  GradientRequest request{"loss", {"w"}, {}, {{"", 17}}};
  EXPECT_ERROR(AppendGradients(g, request), ErrorCode::kInvalidModel, "string tensors are not differentiable");
}

}  // namespace

std::vector<testing::OpCase> testing::StringOpsCases() { return BadStringRows(); }

}  // namespace edgetrain
