// Int64Vector: a vector of int64 that keeps up to kInlineSize values inside the object, so that
// making, copying and passing a tensor's shape, strides or axes does not touch the heap.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <iterator>
#include <new>
#include <vector>

namespace edgetrain {

class Int64Vector {
 public:
  static constexpr size_t kInlineSize = 8;
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  Int64Vector() = default;
  explicit Int64Vector(size_t count, int64_t value = 0) { assign(count, value); }
  Int64Vector(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  Int64Vector(It first, It last) {
    assign(first, last);
  }
  Int64Vector(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }  // NOLINT: implicit by design
  Int64Vector(const Int64Vector& other) { assign(other.begin(), other.end()); }
  Int64Vector(Int64Vector&& other) noexcept { Take(other); }
  Int64Vector& operator=(const Int64Vector& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  Int64Vector& operator=(Int64Vector&& other) noexcept {
    if (this != &other) {
      Release();
      Take(other);
    }
    return *this;
  }
  Int64Vector& operator=(std::initializer_list<int64_t> dims) {
    assign(dims.begin(), dims.end());
    return *this;
  }
  ~Int64Vector() { Release(); }

  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }  // NOLINT

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  int64_t* data() { return data_; }
  const int64_t* data() const { return data_; }
  iterator begin() { return data_; }
  iterator end() { return data_ + size_; }
  const_iterator begin() const { return data_; }
  const_iterator end() const { return data_ + size_; }
  const_iterator cbegin() const { return data_; }
  const_iterator cend() const { return data_ + size_; }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }
  int64_t& operator[](size_t i) { return data_[i]; }
  const int64_t& operator[](size_t i) const { return data_[i]; }
  int64_t& front() { return data_[0]; }
  const int64_t& front() const { return data_[0]; }
  int64_t& back() { return data_[size_ - 1]; }
  const int64_t& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= capacity_) return;
    auto* grown = static_cast<int64_t*>(std::malloc(n * sizeof(int64_t)));
    if (!grown) throw std::bad_alloc();
    std::copy(begin(), end(), grown);
    if (data_ != inline_) std::free(data_);
    data_ = grown;
    capacity_ = n;
  }
  void clear() { size_ = 0; }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    if (n > size_) std::fill(data_ + size_, data_ + n, value);
    size_ = n;
  }
  void push_back(int64_t value) {
    if (size_ == capacity_) reserve(capacity_ * 2);
    data_[size_++] = value;
  }
  void emplace_back(int64_t value) { push_back(value); }
  void pop_back() { --size_; }
  void assign(size_t count, int64_t value) {
    clear();
    resize(count, value);
  }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  void assign(It first, It last) {
    clear();
    reserve(static_cast<size_t>(std::distance(first, last)));
    for (; first != last; ++first) data_[size_++] = static_cast<int64_t>(*first);
  }
  iterator insert(const_iterator pos, int64_t value) { return insert(pos, size_t{1}, value); }
  iterator insert(const_iterator pos, size_t count, int64_t value) {
    const size_t at = static_cast<size_t>(pos - data_);
    OpenGap(at, count);
    std::fill(data_ + at, data_ + at + count, value);
    return data_ + at;
  }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - data_);
    const Int64Vector values(first, last);  // copied first: the range may alias this vector
    OpenGap(at, values.size());
    std::copy(values.begin(), values.end(), data_ + at);
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> values) {
    return insert(pos, values.begin(), values.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const size_t at = static_cast<size_t>(first - data_), count = static_cast<size_t>(last - first);
    std::copy(data_ + at + count, data_ + size_, data_ + at);
    size_ -= count;
    return data_ + at;
  }

  friend bool operator==(const Int64Vector& a, const Int64Vector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator!=(const Int64Vector& a, const Int64Vector& b) { return !(a == b); }
  friend bool operator<(const Int64Vector& a, const Int64Vector& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void OpenGap(size_t at, size_t count) {
    reserve(std::max(size_ + count, capacity_ * 2));
    std::copy_backward(data_ + at, data_ + size_, data_ + size_ + count);
    size_ += count;
  }
  void Release() {
    if (data_ != inline_) std::free(data_);
    data_ = inline_;
    size_ = 0;
    capacity_ = kInlineSize;
  }
  void Take(Int64Vector& other) {
    if (other.data_ == other.inline_) {
      std::copy(other.begin(), other.end(), inline_);
      data_ = inline_;
    } else {
      data_ = other.data_;
    }
    size_ = other.size_;
    capacity_ = other.capacity_;
    other.data_ = other.inline_;
    other.size_ = 0;
    other.capacity_ = kInlineSize;
  }

  int64_t inline_[kInlineSize];
  int64_t* data_ = inline_;
  size_t size_ = 0;
  size_t capacity_ = kInlineSize;
};

// A tensor's dimensions.
using Shape = Int64Vector;

}  // namespace edgetrain
