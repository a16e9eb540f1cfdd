// Export options bound to the operator registry (defined in session.cpp beside ExecutionImportOptions).
#pragma once

#include "onnx/exporter.hpp"

namespace edgetrain {

// Writes each ai.edgetrain operator with its registered standard-ONNX definition.
ExportOptions ExecutionExportOptions();

}  // namespace edgetrain
