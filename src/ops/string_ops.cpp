// String tensors: conversions for Cast/CastLike, StringNormalizer, TfIdfVectorizer, and opset 20's StringConcat,
// StringSplit and RegexFullMatch. None is differentiable (no gradient rules).
#include "ops/string_ops.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cwctype>
#include <limits>
#include <locale.h>
#include <map>
#include <regex>
#include <set>

#include "ops/elementwise_util.hpp"
#include "ops/registry.hpp"

namespace edgetrain {

namespace {

// Floating-point <charconv>, or snprintf/strtod where the standard library lacks it (emscripten 3.1.6's libc++).
#if defined(__cpp_lib_to_chars)
template <typename F>
char* FloatToChars(char* first, char* last, F value) { return std::to_chars(first, last, value).ptr; }
template <typename F>
char* FloatToChars(char* first, char* last, F value, int precision) {
  return std::to_chars(first, last, value, std::chars_format::general, precision).ptr;
}
template <typename F>
std::from_chars_result FloatFromChars(const char* first, const char* last, F& value) {
  return std::from_chars(first, last, value);
}
#else
template <typename F>
F ParsePrefix(const char* text, char** end) {
  if constexpr (std::is_same_v<F, float>) return std::strtof(text, end);
  else return std::strtod(text, end);
}
template <typename F>
char* FloatToChars(char* first, char* last, F value, int precision) {
  return first + std::snprintf(first, static_cast<size_t>(last - first), "%.*g", precision, static_cast<double>(value));
}
template <typename F>
char* FloatToChars(char* first, char* last, F value) {  // to_chars' shortest form: fewest digits, then fewest chars
  const size_t size = static_cast<size_t>(last - first);
  int digits = 1;
  for (; digits < std::numeric_limits<F>::max_digits10; ++digits) {
    std::snprintf(first, size, "%.*e", digits - 1, static_cast<double>(value));
    if (ParsePrefix<F>(first, nullptr) == value) break;
  }
  const int scientific = std::snprintf(first, size, "%.*e", digits - 1, static_cast<double>(value));
  const int exponent = std::atoi(std::strchr(first, 'e') + 1);
  char fixed[400];
  const int decimals = exponent >= digits - 1 ? 0 : digits - 1 - exponent;
  const int fixed_size = std::snprintf(fixed, sizeof fixed, "%.*f", decimals, static_cast<double>(value));
  if (fixed_size > scientific || fixed_size >= static_cast<int>(size)) return first + scientific;
  std::memcpy(first, fixed, static_cast<size_t>(fixed_size) + 1);
  return first + fixed_size;
}
template <typename F>
std::from_chars_result FloatFromChars(const char* first, const char* last, F& value) {
  const std::string text(first, last);
  char* end = nullptr;
  errno = 0;
  const F parsed = ParsePrefix<F>(text.c_str(), &end);
  const char* stop = first + (end - text.c_str());
  if (stop == first) return {first, std::errc::invalid_argument};
  if (errno == ERANGE) return {stop, std::errc::result_out_of_range};
  value = parsed;
  return {stop, std::errc()};
}
#endif

constexpr std::string_view kWhitespace = " \t\n\v\f\r";

bool EqualsIgnoringAsciiCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view Trimmed(std::string_view text) {
  const size_t begin = text.find_first_not_of(kWhitespace);
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(kWhitespace) - begin + 1);
}

// The special values of ONNX Cast ("INF", "+INF", "-INF", "NaN", any case); false when `text` is none of them.
bool SpecialFloat(std::string_view text, double& value) {
  if (EqualsIgnoringAsciiCase(text, "nan")) value = std::numeric_limits<double>::quiet_NaN();
  else if (EqualsIgnoringAsciiCase(text, "inf") || EqualsIgnoringAsciiCase(text, "+inf"))
    value = std::numeric_limits<double>::infinity();
  else if (EqualsIgnoringAsciiCase(text, "-inf")) value = -std::numeric_limits<double>::infinity();
  else return false;
  return true;
}

template <typename F>
bool ParseFloat(std::string_view text, F& value) {
  double special = 0;
  if (SpecialFloat(text, special)) {
    value = static_cast<F>(special);
    return true;
  }
  const bool plus = !text.empty() && text[0] == '+';
  if (plus) text.remove_prefix(1);
  if (text.empty() || text[0] == '+' || (plus && text[0] == '-')) return false;
  const auto [end, error] = FloatFromChars(text.data(), text.data() + text.size(), value);
  if (end != text.data() + text.size()) return false;
  if (error == std::errc::result_out_of_range) {  // overflow to +-inf, underflow to zero, as strtod does
    value = static_cast<F>(std::strtod(std::string(text).c_str(), nullptr));
    return true;
  }
  return error == std::errc();
}

template <typename I>
I SaturatingToInteger(double value) {
  if (std::isnan(value)) return I{0};
  if (value <= static_cast<double>(std::numeric_limits<I>::lowest())) return std::numeric_limits<I>::lowest();
  if (value >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(value);
}

template <typename T>
constexpr bool kIsHalfType = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

}  // namespace

template <typename T>
std::string NumberToString(T value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value ? "1" : "0";
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(value);
  } else {
    const double wide = static_cast<double>(static_cast<std::conditional_t<kIsHalfType<T>, float, T>>(value));
    if (std::isnan(wide)) return "NaN";
    if (std::isinf(wide)) return wide < 0 ? "-INF" : "INF";
    char buffer[64];
    if constexpr (kIsHalfType<T>) {  // the fewest digits that read back to the same 16-bit pattern
      for (int precision = 1; precision < 9; ++precision) {
        char* const end = FloatToChars(buffer, buffer + sizeof buffer, static_cast<float>(wide), precision);
        float back = 0;
        FloatFromChars(buffer, end, back);
        if (T(back).bits == value.bits) return std::string(buffer, end);
      }
      return std::string(buffer, FloatToChars(buffer, buffer + sizeof buffer, static_cast<float>(wide)));
    } else {
      return std::string(buffer, FloatToChars(buffer, buffer + sizeof buffer, value));
    }
  }
}

template <typename T>
T StringToNumber(std::string_view text, const std::string& what) {
  const std::string_view trimmed = Trimmed(text);
  auto fail = [&]() -> T {
    Fail(ErrorCode::kInvalidArgument, what, ": '", text.substr(0, 64), text.size() > 64 ? "...'" : "'",
         " is not a number");
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (EqualsIgnoringAsciiCase(trimmed, "true")) return true;
    if (EqualsIgnoringAsciiCase(trimmed, "false")) return false;
    double value = 0;
    if (!ParseFloat(trimmed, value)) return fail();
    return value != 0;
  } else if constexpr (std::is_integral_v<T>) {
    std::string_view digits = trimmed;
    if (!digits.empty() && digits[0] == '+' && digits.size() > 1 && digits[1] != '-') digits.remove_prefix(1);
    T value{};
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (end == digits.data() + digits.size() && !digits.empty()) {
      if (error == std::errc()) return value;
      if (error == std::errc::result_out_of_range)
        return digits[0] == '-' ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    }
    double wide = 0;  // "100.5", "1e3": truncated toward zero
    if (!ParseFloat(trimmed, wide)) return fail();
    return SaturatingToInteger<T>(wide);
  } else if constexpr (kIsHalfType<T>) {
    float value = 0;
    if (!ParseFloat(trimmed, value)) return fail();
    return T(value);
  } else {
    T value = 0;
    if (!ParseFloat(trimmed, value)) return fail();
    return value;
  }
}

#define ET_STRING_CONVERSIONS(T)                       \
  template std::string NumberToString<T>(T);           \
  template T StringToNumber<T>(std::string_view, const std::string&);
ET_STRING_CONVERSIONS(bool)
ET_STRING_CONVERSIONS(int8_t)
ET_STRING_CONVERSIONS(int16_t)
ET_STRING_CONVERSIONS(int32_t)
ET_STRING_CONVERSIONS(int64_t)
ET_STRING_CONVERSIONS(uint8_t)
ET_STRING_CONVERSIONS(uint16_t)
ET_STRING_CONVERSIONS(uint32_t)
ET_STRING_CONVERSIONS(uint64_t)
ET_STRING_CONVERSIONS(float)
ET_STRING_CONVERSIONS(double)
ET_STRING_CONVERSIONS(Float16)
ET_STRING_CONVERSIONS(BFloat16)
#undef ET_STRING_CONVERSIONS

void CastStrings(const Tensor& src, Tensor& dst, const std::string& what) {
  ET_CHECK(src.numel() == dst.numel(), ErrorCode::kInternal, what, ": cast between different element counts");
  if (src.dtype() == DataType::kString && dst.dtype() == DataType::kString) {
    CopyTensorData(src, dst);
  } else if (src.dtype() == DataType::kString) {
    const std::string* in = src.data<std::string>();
    VisitAll(dst.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = dst.data<T>();
      for (int64_t i = 0; i < src.numel(); ++i)
        out[i] = StringToNumber<T>(in[i], what + ": element " + std::to_string(i) + " of the string input");
    });
  } else {
    std::string* out = dst.data<std::string>();
    VisitAll(src.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* in = src.data<T>();
      for (int64_t i = 0; i < src.numel(); ++i) out[i] = NumberToString(in[i]);
    });
  }
}

namespace {

const std::string& What(const KernelContext& ctx) { return ctx.node().Describe(); }

const Tensor& StringInput(const KernelContext& ctx, size_t i) {
  const Tensor& t = ctx.Input(i);
  ET_CHECK(t.dtype() == DataType::kString, ErrorCode::kInvalidArgument, What(ctx), ": input ", i, " ('",
           ctx.node().inputs[i], "') must be a string tensor, got ", DataTypeName(t.dtype()));
  return t;
}

std::vector<std::string> StringsAttr(const Node& node, std::string_view key) {
  const Attribute* a = node.Find(std::string(key));
  if (!a) return {};
  ET_CHECK(a->kind == Attribute::Kind::kStrings, ErrorCode::kInvalidModel, node.Describe(), ": attribute '", key,
           "' must be a list of strings");
  return a->strings;
}

// ---- case mapping: UTF-8 code points through the C.UTF-8 locale's tables (ASCII when it is missing) ----

locale_t Utf8Locale() {
  static const locale_t locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return locale;
}

// Decodes one UTF-8 sequence at s[i]; an invalid byte comes back as itself (and is kept as it is).
char32_t DecodeUtf8(std::string_view s, size_t& i, bool& valid) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 0;
  valid = length != 0 && i + length <= s.size();
  char32_t c = length == 1 ? lead : length == 2 ? lead & 0x1f : length == 3 ? lead & 0x0f : lead & 0x07;
  for (size_t k = 1; valid && k < length; ++k) {
    valid = (byte(i + k) & 0xc0) == 0x80;
    c = (c << 6) | (byte(i + k) & 0x3f);
  }
  if (!valid) {
    ++i;
    return lead;
  }
  i += length;
  return c;
}

void AppendUtf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

std::string ChangeCase(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  const locale_t locale = Utf8Locale();
  for (size_t i = 0; i < s.size();) {
    bool valid = true;
    const char32_t c = DecodeUtf8(s, i, valid);
    if (!valid) {
      out += static_cast<char>(c);
    } else if (c < 0x80) {
      out += static_cast<char>(upper ? std::toupper(static_cast<int>(c)) : std::tolower(static_cast<int>(c)));
    } else if (locale == static_cast<locale_t>(0)) {
      AppendUtf8(out, c);
    } else {
      const wint_t mapped = upper ? towupper_l(static_cast<wint_t>(c), locale) : towlower_l(static_cast<wint_t>(c), locale);
      AppendUtf8(out, static_cast<char32_t>(mapped));
    }
  }
  return out;
}

// ---- StringNormalizer-10 ----

void StringNormalizerKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const Tensor& x = StringInput(ctx, 0);
  ET_CHECK(x.rank() == 1 || (x.rank() == 2 && x.dim(0) == 1), ErrorCode::kInvalidArgument, What(ctx),
           ": input must have shape [C] or [1, C], got ", ShapeToString(x.shape()));
  const std::string action = node.GetString("case_change_action", "NONE");
  ET_CHECK(action == "NONE" || action == "LOWER" || action == "UPPER", ErrorCode::kInvalidModel, What(ctx),
           ": attribute 'case_change_action' is '", action, "'; expected LOWER, UPPER or NONE");
  const std::string locale = node.GetString("locale", "");
  static const std::set<std::string> kLocales = {"", "C", "POSIX", "C.UTF-8", "en_US", "en_US.UTF-8", "en_GB",
                                                 "en_GB.UTF-8", "en"};
  ET_CHECK(kLocales.count(locale), ErrorCode::kNotImplemented, What(ctx), ": locale '", locale,
           "' is not supported (the C/English locales are; case changes use Unicode's simple case mapping)");
  const bool case_sensitive = node.GetInt("is_case_sensitive", 0) != 0;
  std::set<std::string> stopwords;
  for (const std::string& word : StringsAttr(node, "stopwords"))
    stopwords.insert(case_sensitive ? word : ChangeCase(word, false));

  const std::string* in = x.data<std::string>();
  std::vector<const std::string*> kept;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (stopwords.empty() || !stopwords.count(case_sensitive ? in[i] : ChangeCase(in[i], false))) kept.push_back(&in[i]);
  const int64_t count = std::max<int64_t>(static_cast<int64_t>(kept.size()), 1);  // all removed: one empty string
  Tensor& y = ctx.Output(0, x.rank() == 1 ? Shape{count} : Shape{1, count}, DataType::kString);
  std::string* out = y.data<std::string>();
  out[0].clear();
  for (size_t i = 0; i < kept.size(); ++i)
    out[i] = action == "NONE" ? *kept[i] : ChangeCase(*kept[i], action == "UPPER");
}

// ---- TfIdfVectorizer-9 ----

enum class TfIdfMode { kTf, kIdf, kTfIdf };

template <typename Key>
void TfIdfCount(KernelContext& ctx, const std::vector<Key>& items, int64_t rows, int64_t columns,
                const std::vector<std::vector<Key>>& pool, const Int64Vector& indexes, const std::vector<float>& weights,
                TfIdfMode mode, int64_t width) {
  const Node& node = ctx.node();
  const int64_t min_gram = node.GetInt("min_gram_length", 0), max_gram = node.GetInt("max_gram_length", 0);
  const int64_t max_skip = node.GetInt("max_skip_count", 0);
  std::map<std::vector<Key>, int64_t> lookup;  // n-gram -> its place in the pool
  for (size_t i = 0; i < pool.size(); ++i) lookup.emplace(pool[i], static_cast<int64_t>(i));
  Tensor& y = ctx.Output(0, ctx.Input(0).rank() == 1 ? Shape{width} : Shape{rows, width}, DataType::kFloat32);
  float* counts = y.data<float>();
  std::fill_n(counts, y.numel(), 0.0f);
  std::vector<Key> gram;
  for (int64_t row = 0; row < rows; ++row) {
    const Key* begin = items.data() + row * columns;
    int64_t first_size = min_gram;
    for (int64_t skip = 0; skip <= std::min(max_skip, columns) && first_size <= max_gram; ++skip) {
      const int64_t step = skip + 1;
      for (int64_t start = 0; start < columns; ++start) {
        gram.clear();
        for (int64_t n = 1; n <= max_gram && start + (n - 1) * step < columns; ++n) {
          gram.push_back(begin[start + (n - 1) * step]);
          if (n < first_size) continue;
          const auto hit = lookup.find(gram);
          if (hit != lookup.end()) counts[row * width + indexes[static_cast<size_t>(hit->second)]] += 1;
        }
      }
      if (first_size == 1) first_size = 2;  // unigrams do not depend on the skip: counted once
    }
  }
  std::vector<float> weight_at(static_cast<size_t>(width), 1.0f);
  for (size_t i = 0; i < weights.size(); ++i) weight_at[static_cast<size_t>(indexes[i])] = weights[i];
  if (mode == TfIdfMode::kTf) return;
  for (int64_t i = 0; i < rows * width; ++i) {
    const float weight = weight_at[static_cast<size_t>(i % width)];
    counts[i] = mode == TfIdfMode::kIdf ? (counts[i] > 0 ? weight : 0.0f) : counts[i] * weight;
  }
}

void TfIdfVectorizerKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const std::string& what = What(ctx);
  for (const char* required : {"max_gram_length", "min_gram_length", "max_skip_count", "mode", "ngram_counts",
                               "ngram_indexes"})
    ET_CHECK(node.HasAttr(required), ErrorCode::kInvalidModel, what, ": attribute '", required, "' is required");
  const int64_t min_gram = node.GetInt("min_gram_length", 0), max_gram = node.GetInt("max_gram_length", 0);
  const int64_t max_skip = node.GetInt("max_skip_count", 0);
  ET_CHECK(min_gram >= 1 && max_gram >= min_gram, ErrorCode::kInvalidModel, what, ": min_gram_length ", min_gram,
           " and max_gram_length ", max_gram, " must satisfy 1 <= min <= max");
  ET_CHECK(max_skip >= 0, ErrorCode::kInvalidModel, what, ": max_skip_count ", max_skip, " is negative");
  const std::string mode_name = node.GetString("mode", "");
  ET_CHECK(mode_name == "TF" || mode_name == "IDF" || mode_name == "TFIDF", ErrorCode::kInvalidModel, what,
           ": attribute 'mode' is '", mode_name, "'; expected TF, IDF or TFIDF");
  const TfIdfMode mode = mode_name == "TF" ? TfIdfMode::kTf : mode_name == "IDF" ? TfIdfMode::kIdf : TfIdfMode::kTfIdf;
  const bool int_pool = node.HasAttr("pool_int64s"), string_pool = node.HasAttr("pool_strings");
  ET_CHECK(int_pool != string_pool, ErrorCode::kInvalidModel, what,
           ": exactly one of the attributes 'pool_int64s' and 'pool_strings' is required");
  const Int64Vector pool_ints = node.GetInts("pool_int64s");
  const std::vector<std::string> pool_strings = StringsAttr(node, "pool_strings");
  const int64_t pool_size = int_pool ? static_cast<int64_t>(pool_ints.size()) : static_cast<int64_t>(pool_strings.size());
  const Int64Vector starts = node.GetInts("ngram_counts"), indexes = node.GetInts("ngram_indexes");
  const std::vector<float> weights = node.GetFloats("weights");

  // The pool holds the 1-grams from starts[0], the 2-grams from starts[1], ...
  std::vector<std::vector<int64_t>> grams;  // positions in the pool, one list per n-gram
  for (size_t level = 0; level < starts.size(); ++level) {
    const int64_t n = static_cast<int64_t>(level) + 1;
    const int64_t begin = starts[level], end = level + 1 < starts.size() ? starts[level + 1] : pool_size;
    ET_CHECK(begin >= 0 && begin <= end && end <= pool_size && (end - begin) % n == 0, ErrorCode::kInvalidModel,
             what, ": ngram_counts ", begin, "..", end, " for ", n, "-grams does not split a pool of ", pool_size,
             " items into ", n, "-grams");
    for (int64_t g = begin; g < end; g += n) {
      std::vector<int64_t> at(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) at[static_cast<size_t>(k)] = g + k;
      grams.push_back(std::move(at));
    }
  }
  ET_CHECK(indexes.size() == grams.size(), ErrorCode::kInvalidModel, what, ": ngram_indexes has ", indexes.size(),
           " entries for the pool's ", grams.size(), " n-grams");
  ET_CHECK(weights.empty() || weights.size() == grams.size(), ErrorCode::kInvalidModel, what, ": weights has ",
           weights.size(), " entries for the pool's ", grams.size(), " n-grams");
  int64_t width = 0;
  for (int64_t index : indexes) {
    ET_CHECK(index >= 0 && index < (int64_t{1} << 31), ErrorCode::kInvalidModel, what, ": ngram_indexes entry ",
             index, " is out of range");
    width = std::max(width, index + 1);
  }

  const Tensor& x = ctx.Input(0);
  ET_CHECK(x.rank() == 1 || x.rank() == 2, ErrorCode::kInvalidArgument, what, ": input must have shape [C] or [N, C], got ",
           ShapeToString(x.shape()));
  const int64_t rows = x.rank() == 1 ? 1 : x.dim(0), columns = x.rank() == 1 ? x.dim(0) : x.dim(1);
  if (x.dtype() == DataType::kString) {
    ET_CHECK(string_pool, ErrorCode::kInvalidArgument, what, ": a string input needs the attribute 'pool_strings'");
    std::vector<std::vector<std::string>> pool;
    for (const auto& at : grams) {
      auto& gram = pool.emplace_back();
      for (int64_t k : at) gram.push_back(pool_strings[static_cast<size_t>(k)]);
    }
    const std::string* in = x.data<std::string>();
    TfIdfCount<std::string>(ctx, std::vector<std::string>(in, in + x.numel()), rows, columns, pool, indexes, weights,
                            mode, width);
  } else {
    ET_CHECK(x.dtype() == DataType::kInt32 || x.dtype() == DataType::kInt64, ErrorCode::kInvalidArgument, what,
             ": input must be int32, int64 or string, got ", DataTypeName(x.dtype()));
    ET_CHECK(int_pool, ErrorCode::kInvalidArgument, what, ": an integer input needs the attribute 'pool_int64s'");
    std::vector<std::vector<int64_t>> pool;
    for (const auto& at : grams) {
      auto& gram = pool.emplace_back();
      for (int64_t k : at) gram.push_back(pool_ints[static_cast<size_t>(k)]);
    }
    TfIdfCount<int64_t>(ctx, x.ToInt64Vector(), rows, columns, pool, indexes, weights, mode, width);
  }
}

// ---- opset 20: StringConcat, StringSplit, RegexFullMatch ----

void StringConcatKernel(KernelContext& ctx) {
  const Tensor& a = StringInput(ctx, 0);
  const Tensor& b = StringInput(ctx, 1);
  Tensor& y = ctx.Output(0, BroadcastShapes(a.shape(), b.shape()), DataType::kString);
  elementwise::BroadcastBinary<std::string, std::string, std::string>(
      ctx.threads(), a, b, y, [](const std::string& x, const std::string& z) { return x + z; });
}

// Python's str.split: on `delimiter`, or on runs of whitespace (ends ignored) when it is empty.
std::vector<std::string_view> SplitString(std::string_view s, std::string_view delimiter, int64_t max_splits) {
  std::vector<std::string_view> parts;
  if (delimiter.empty()) {
    size_t pos = s.find_first_not_of(kWhitespace);
    while (pos != std::string_view::npos) {
      if (max_splits >= 0 && static_cast<int64_t>(parts.size()) == max_splits) {
        parts.push_back(s.substr(pos));
        break;
      }
      const size_t end = std::min(s.find_first_of(kWhitespace, pos), s.size());
      parts.push_back(s.substr(pos, end - pos));
      pos = s.find_first_not_of(kWhitespace, end);
    }
    return parts;
  }
  size_t pos = 0;
  while (max_splits < 0 || static_cast<int64_t>(parts.size()) < max_splits) {
    const size_t end = s.find(delimiter, pos);
    if (end == std::string_view::npos) break;
    parts.push_back(s.substr(pos, end - pos));
    pos = end + delimiter.size();
  }
  parts.push_back(s.substr(pos));
  return parts;
}

void StringSplitKernel(KernelContext& ctx) {
  const Tensor& x = StringInput(ctx, 0);
  const std::string delimiter = ctx.node().GetString("delimiter", "");
  const int64_t max_splits = ctx.node().HasAttr("maxsplit") ? ctx.node().GetInt("maxsplit", 0) : -1;
  ET_CHECK(!ctx.node().HasAttr("maxsplit") || max_splits >= 0, ErrorCode::kInvalidModel, What(ctx),
           ": attribute 'maxsplit' is ", max_splits, "; it must not be negative");
  const std::string* in = x.data<std::string>();
  std::vector<std::vector<std::string_view>> parts(static_cast<size_t>(x.numel()));
  int64_t widest = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    parts[static_cast<size_t>(i)] = SplitString(in[i], delimiter, max_splits);
    widest = std::max(widest, static_cast<int64_t>(parts[static_cast<size_t>(i)].size()));
  }
  Shape shape = x.shape();
  shape.push_back(widest);
  Tensor& y = ctx.Output(0, shape, DataType::kString);
  Tensor& counts = ctx.Output(1, x.shape(), DataType::kInt64);
  std::string* out = y.data<std::string>();
  int64_t* count = counts.data<int64_t>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const auto& row = parts[static_cast<size_t>(i)];
    count[i] = static_cast<int64_t>(row.size());
    for (int64_t k = 0; k < widest; ++k)
      out[i * widest + k] = k < count[i] ? std::string(row[static_cast<size_t>(k)]) : std::string();
  }
}

// The pattern is read as an ECMAScript regular expression (std::regex), which covers the RE2 syntax the node
// tests use (classes, \b, \w, alternation, counted repetition).
void RegexFullMatchKernel(KernelContext& ctx) {
  const Tensor& x = StringInput(ctx, 0);
  ET_CHECK(ctx.node().HasAttr("pattern"), ErrorCode::kInvalidModel, What(ctx), ": attribute 'pattern' is required");
  const std::string pattern = ctx.node().GetString("pattern", "");
  std::regex regex;
  try {
    regex.assign(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    Fail(ErrorCode::kInvalidModel, What(ctx), ": attribute 'pattern' ('", pattern, "') is not a valid regular expression: ",
         e.what());
  }
  Tensor& y = ctx.Output(0, x.shape(), DataType::kBool);
  const std::string* in = x.data<std::string>();
  bool* out = y.data<bool>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = std::regex_match(in[i], regex);
}

}  // namespace

void RegisterStringOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "StringNormalizer", StringNormalizerKernel, 10);
  ET_REGISTER_ONNX(r, "TfIdfVectorizer", TfIdfVectorizerKernel, 9);
  ET_REGISTER_ONNX(r, "StringConcat", StringConcatKernel, 20);
  ET_REGISTER_ONNX(r, "StringSplit", StringSplitKernel, 20);
  ET_REGISTER_ONNX(r, "RegexFullMatch", RegexFullMatchKernel, 20);
}

void RejectStringInputs(const OpKernelEntry& entry, const Node& node, std::span<const RuntimeValue* const> inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i] || inputs[i]->is_sequence || inputs[i]->tensor.dtype() != DataType::kString) continue;
    // The string operators above, and the operators of other families whose kernels move or compare strings.
    static const std::set<std::string, std::less<>> kAccepting = {
        "StringNormalizer", "TfIdfVectorizer", "StringConcat", "StringSplit", "RegexFullMatch", "Cast", "CastLike",
        "Equal", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Shape", "Size", "Optional",
        "OptionalGetElement", "OptionalHasElement"};
    ET_CHECK(entry.domain.empty() && kAccepting.count(entry.op_type), ErrorCode::kNotImplemented, node.Describe(),
             ": input ", i, " ('", node.inputs[i], "') is a string tensor, which this operator does not accept");
    return;
  }
}

}  // namespace edgetrain
