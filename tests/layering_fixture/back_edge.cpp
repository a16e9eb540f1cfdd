// Fixture for layering_check_detects_back_edge: a device file with a back-edge.
#include "autodiff/autodiff.hpp"
