// Bindings for the frequency switcher, NVML and the CUDA driver
// (cpp/switcher.hpp, cpp/nvml_loader.hpp, cpp/cuda_loader.hpp,
// cpp/cuda_module.hpp). Python's facade is python/perseus/switcher.py.
#include "pybind11.hpp"

#include <chrono>
#include <cmath>
#include <memory>

#include "cuda_loader.hpp"
#include "cuda_module.hpp"
#include "nvml_loader.hpp"
#include "switcher.hpp"

using perseus::FrequencySwitcher;
using perseus::SwitcherOptions;
using perseus::SwitchRecord;
namespace nvml = perseus::nvml;
namespace cuda = perseus::cuda;

namespace {

PYBIND11_CONSTINIT py::gil_safe_call_once_and_store<py::object> nvml_error_type;
PYBIND11_CONSTINIT py::gil_safe_call_once_and_store<py::object> cuda_error_type;
PYBIND11_CONSTINIT py::gil_safe_call_once_and_store<py::object> library_error_type;

// Raises `type(message)` with extra attributes set on the instance.
void raise_with(const py::object& type, const char* message, const py::dict& attributes) {
  py::object instance = type(message);
  for (auto item : attributes) py::setattr(instance, item.first, item.second);
  PyErr_SetObject(type.ptr(), instance.ptr());
}

unsigned checked_mhz(long long mhz) {
  if (mhz <= 0 || mhz > 100000) throw py::value_error("a clock must be a positive number of MHz, got " + std::to_string(mhz));
  return static_cast<unsigned>(mhz);
}

py::array_t<std::uint32_t> as_array(const std::vector<unsigned>& v) {
  return to_numpy(std::vector<std::uint32_t>(v.begin(), v.end()));
}

// Waits in slices so that Ctrl-C and other signals still reach Python.
template <typename Wait>
bool wait_interruptibly(double timeout_s, Wait wait) {
  const bool forever = !(timeout_s >= 0) || std::isinf(timeout_s);
  const auto slice = std::chrono::milliseconds(50);
  auto left = std::chrono::duration<double>(forever ? 0.0 : timeout_s);
  for (;;) {
    const auto step = forever ? slice
                              : std::min<std::chrono::nanoseconds>(
                                    slice, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
    bool done = false;
    {
      py::gil_scoped_release release;
      done = wait(static_cast<std::int64_t>(step.count()));
    }
    if (done) return true;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (!forever) {
      left -= step;
      if (left.count() <= 0) return false;
    }
  }
}

py::dict records_dict(const FrequencySwitcher& s) {
  std::uint64_t dropped = 0;
  std::vector<SwitchRecord> rs;
  {
    py::gil_scoped_release release;
    rs = s.records(&dropped);
  }
  const std::size_t n = rs.size();
  std::vector<std::int64_t> time_ns(n), requested_ns(n), latency_ns(n);
  std::vector<std::uint32_t> requested(n), applied(n);
  std::vector<std::int32_t> status(n);
  std::vector<std::uint8_t> source(n);
  for (std::size_t i = 0; i < n; ++i) {
    time_ns[i] = rs[i].time_ns;
    requested_ns[i] = rs[i].requested_ns;
    latency_ns[i] = rs[i].latency_ns;
    requested[i] = rs[i].requested_mhz;
    applied[i] = rs[i].applied_mhz;
    status[i] = rs[i].status;
    source[i] = static_cast<std::uint8_t>(rs[i].source);
  }
  py::dict out;
  out["time_ns"] = to_numpy(std::move(time_ns));
  out["requested_ns"] = to_numpy(std::move(requested_ns));
  out["latency_ns"] = to_numpy(std::move(latency_ns));
  out["requested_mhz"] = to_numpy(std::move(requested));
  out["applied_mhz"] = to_numpy(std::move(applied));
  out["status"] = to_numpy(std::move(status));
  out["source"] = to_numpy(std::move(source));
  out["dropped"] = dropped;
  return out;
}

// Direct NVML access to one GPU, for `perseus reset-clocks`, the profiler and
// the GPU check. Unlike the switcher, every call runs on the caller's thread.
class NvmlDevice {
 public:
  explicit NvmlDevice(int index)
      : session_(std::make_unique<nvml::Session>()), info_(nvml::open_device(*session_, index)) {}
  NvmlDevice(const NvmlDevice&) = delete;
  NvmlDevice& operator=(const NvmlDevice&) = delete;

  const nvml::DeviceInfo& info() const { return info_; }
  const nvml::Api& api() const { return session_->api(); }
  nvml::Device handle() const { return info_.handle; }

 private:
  std::unique_ptr<nvml::Session> session_;
  nvml::DeviceInfo info_;
};

void check_optional(const nvml::Api& api, const void* fn, const char* name) {
  if (fn == nullptr) throw nvml::Error(api, nvml::kErrorFunctionNotFound, name);
}

}  // namespace

void register_switcher(py::module_& m) {
  nvml_error_type.call_once_and_store_result([&]() {
    py::object t = py::exception<nvml::Error>(m, "NvmlError", PyExc_RuntimeError);
    t.attr("__doc__") =
        "An NVML call failed. ``code`` is NVML's return code (e.g. 4, NO_PERMISSION), "
        "``function`` the NVML function; the message carries NVML's description and a hint.";
    return t;
  });
  cuda_error_type.call_once_and_store_result([&]() {
    py::object t = py::exception<cuda::Error>(m, "CudaError", PyExc_RuntimeError);
    t.attr("__doc__") = "A CUDA driver call failed; ``code`` is the CUresult.";
    return t;
  });
  library_error_type.call_once_and_store_result([&]() {
    py::object t = py::exception<perseus::LibraryError>(m, "LibraryLoadError", PyExc_OSError);
    t.attr("__doc__") =
        "The NVML or CUDA driver library could not be loaded; the message names the library "
        "and the environment variable (PERSEUS_NVML_LIBRARY, PERSEUS_CUDA_LIBRARY) that "
        "overrides it.";
    return t;
  });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const nvml::Error& e) {
      raise_with(nvml_error_type.get_stored(), e.what(),
                 py::dict("code"_a = e.code(), "function"_a = e.function()));
    } catch (const cuda::Error& e) {
      raise_with(cuda_error_type.get_stored(), e.what(), py::dict("code"_a = e.code()));
    } catch (const perseus::LibraryError& e) {
      raise_with(library_error_type.get_stored(), e.what(), py::dict());
    }
  });

  py::class_<FrequencySwitcher>(
      m, "Switcher",
      "Native frequency switcher of one GPU (use perseus.FrequencySwitcher instead).")
      .def(py::init([](int device, long long memory_mhz, std::size_t record_capacity) {
             if (memory_mhz < 0) throw py::value_error("memory_mhz must be >= 0");
             SwitcherOptions o;
             o.device = device;
             o.memory_mhz = static_cast<unsigned>(memory_mhz);
             o.record_capacity = record_capacity;
             py::gil_scoped_release release;
             return std::make_unique<FrequencySwitcher>(o);
           }),
           "device"_a = 0, "memory_mhz"_a = 0, "record_capacity"_a = std::size_t{1} << 16)
      .def(
          "set", [](FrequencySwitcher& s, long long mhz) { return s.set(checked_mhz(mhz)); },
          "mhz"_a, "Request an SM clock; returns the supported clock that will be applied.")
      .def(
          "set_on_stream",
          [](FrequencySwitcher& s, std::uintptr_t stream, long long mhz) {
            const unsigned target = checked_mhz(mhz);
            py::gil_scoped_release release;  // the launch may wait for room in the stream
            return s.set_on_stream(stream, target);
          },
          "stream"_a, "mhz"_a, "Request an SM clock when the GPU reaches this point of a stream.")
      .def("reset", &FrequencySwitcher::reset, "Request the driver's default clocks.")
      .def(
          "wait_idle",
          [](FrequencySwitcher& s, std::optional<double> timeout_s) {
            return wait_interruptibly(timeout_s ? *timeout_s : -1.0,
                                      [&s](std::int64_t ns) { return s.wait_idle(ns); });
          },
          "timeout_s"_a = py::none(),
          "Wait until the latest target is applied; False on timeout.")
      .def("close", &FrequencySwitcher::close, py::call_guard<py::gil_scoped_release>(),
           "Reset what was locked, stop the worker.")
      .def(
          "snap", [](const FrequencySwitcher& s, long long mhz) { return s.snap(checked_mhz(mhz)); },
          "mhz"_a)
      .def_property_readonly("supported_mhz",
                             [](const FrequencySwitcher& s) { return as_array(s.supported_mhz()); })
      .def_property_readonly(
          "supported_memory_mhz",
          [](const FrequencySwitcher& s) { return as_array(s.supported_memory_mhz()); })
      .def_property_readonly("memory_mhz", &FrequencySwitcher::memory_mhz)
      .def_property_readonly("applied_mhz", &FrequencySwitcher::applied_mhz)
      .def_property_readonly("device", [](const FrequencySwitcher& s) { return s.device().cuda_index; })
      .def_property_readonly("nvml_index",
                             [](const FrequencySwitcher& s) { return s.device().nvml_index; })
      .def_property_readonly("name", [](const FrequencySwitcher& s) { return s.device().name; })
      .def_property_readonly("uuid", [](const FrequencySwitcher& s) { return s.device().uuid; })
      .def_property_readonly("closed", &FrequencySwitcher::closed)
      .def_property_readonly("failed", &FrequencySwitcher::failed)
      .def_property_readonly("pending_stream_callbacks", &FrequencySwitcher::pending_stream_callbacks)
      .def("records", &records_dict, "The applied-change log as a dict of numpy arrays.");

  py::class_<NvmlDevice>(m, "NvmlDevice",
                         "Direct NVML access to one GPU (CUDA numbering); calls run on the "
                         "caller's thread.")
      .def(py::init([](int index) {
             py::gil_scoped_release release;
             return std::make_unique<NvmlDevice>(index);
           }),
           "index"_a = 0)
      .def_property_readonly("index", [](const NvmlDevice& d) { return d.info().cuda_index; })
      .def_property_readonly("nvml_index", [](const NvmlDevice& d) { return d.info().nvml_index; })
      .def_property_readonly("name", [](const NvmlDevice& d) { return d.info().name; })
      .def_property_readonly("uuid", [](const NvmlDevice& d) { return d.info().uuid; })
      .def("supported_memory_clocks",
           [](const NvmlDevice& d) { return as_array(nvml::supported_memory_clocks(d.api(), d.handle())); },
           "Supported memory clocks in MHz, ascending (empty if not reported).")
      .def(
          "supported_graphics_clocks",
          [](const NvmlDevice& d, std::optional<unsigned> memory_mhz) {
            unsigned mem = memory_mhz.value_or(0);
            if (!memory_mhz) {
              const auto mems = nvml::supported_memory_clocks(d.api(), d.handle());
              if (mems.empty()) return as_array({});
              mem = mems.back();
            }
            return as_array(nvml::supported_graphics_clocks(d.api(), d.handle(), mem));
          },
          "memory_mhz"_a = py::none(),
          "Supported SM clocks in MHz, ascending, at a memory clock (default: the highest).")
      .def(
          "clock_mhz",
          [](const NvmlDevice& d, const std::string& kind) {
            nvml::ClockType type = nvml::kClockSm;
            if (kind == "graphics") type = nvml::kClockGraphics;
            else if (kind == "memory") type = nvml::kClockMem;
            else if (kind != "sm") throw py::value_error("kind must be 'sm', 'graphics' or 'memory'");
            unsigned mhz = 0;
            nvml::check(d.api(), d.api().clock_info(d.handle(), type, &mhz), "nvmlDeviceGetClockInfo");
            return mhz;
          },
          "kind"_a = "sm", "The current clock in MHz.")
      .def(
          "total_energy_mj",
          [](const NvmlDevice& d) {
            check_optional(d.api(), reinterpret_cast<const void*>(d.api().total_energy),
                           "nvmlDeviceGetTotalEnergyConsumption");
            unsigned long long mj = 0;
            nvml::check(d.api(), d.api().total_energy(d.handle(), &mj),
                        "nvmlDeviceGetTotalEnergyConsumption");
            return mj;
          },
          "Energy used since the driver loaded, in millijoules.")
      .def(
          "set_locked_clocks",
          [](const NvmlDevice& d, unsigned min_mhz, unsigned max_mhz) {
            py::gil_scoped_release release;
            nvml::check(d.api(), d.api().set_gpu_locked_clocks(d.handle(), min_mhz, max_mhz),
                        "nvmlDeviceSetGpuLockedClocks");
          },
          "min_mhz"_a, "max_mhz"_a, "Lock the SM clock into [min_mhz, max_mhz].")
      .def(
          "reset_locked_clocks",
          [](const NvmlDevice& d) {
            py::gil_scoped_release release;
            nvml::check(d.api(), d.api().reset_gpu_locked_clocks(d.handle()),
                        "nvmlDeviceResetGpuLockedClocks");
          },
          "Give the SM clock back to the driver.")
      .def(
          "set_memory_locked_clocks",
          [](const NvmlDevice& d, unsigned min_mhz, unsigned max_mhz) {
            check_optional(d.api(), reinterpret_cast<const void*>(d.api().set_memory_locked_clocks),
                           "nvmlDeviceSetMemoryLockedClocks");
            py::gil_scoped_release release;
            nvml::check(d.api(), d.api().set_memory_locked_clocks(d.handle(), min_mhz, max_mhz),
                        "nvmlDeviceSetMemoryLockedClocks");
          },
          "min_mhz"_a, "max_mhz"_a)
      .def(
          "reset_memory_locked_clocks",
          [](const NvmlDevice& d) {
            check_optional(d.api(), reinterpret_cast<const void*>(d.api().reset_memory_locked_clocks),
                           "nvmlDeviceResetMemoryLockedClocks");
            py::gil_scoped_release release;
            nvml::check(d.api(), d.api().reset_memory_locked_clocks(d.handle()),
                        "nvmlDeviceResetMemoryLockedClocks");
          },
          "Give the memory clock back to the driver.");

  m.def(
      "nvml_device_count",
      []() {
        py::gil_scoped_release release;
        const nvml::Session session;
        return nvml::visible_device_count(session);
      },
      "GPUs visible to CUDA (honours CUDA_VISIBLE_DEVICES), counted through NVML.");
  m.def(
      "nvml_driver_version",
      []() {
        py::gil_scoped_release release;
        const nvml::Session session;
        const nvml::Api& a = session.api();
        if (a.driver_version == nullptr) return std::string();
        char buffer[96] = {};
        nvml::check(a, a.driver_version(buffer, sizeof buffer), "nvmlSystemGetDriverVersion");
        return std::string(buffer);
      },
      "The NVIDIA driver version string.");
  m.def(
      "nvml_error_hint", [](int code) { return std::string(nvml::hint(code)); }, "code"_a,
      "What usually fixes an NVML error code ('' if nothing to add).");

  py::class_<cuda::Module>(m, "CudaModule",
                           "A PTX module in the calling thread's current CUDA context.")
      .def(py::init([](const py::bytes& image) { return std::make_unique<cuda::Module>(image); }),
           "image"_a)
      .def("launch", &cuda::Module::launch, "kernel"_a, py::kw_only(), "grid"_a, "block"_a,
           "stream"_a, "arguments"_a, "Launch a kernel whose parameters are all 64-bit integers.")
      .def("close", &cuda::Module::close, "Unload the module (idempotent).");

  py::class_<cuda::MappedHostMemory>(
      m, "MappedHostMemory", "Zeroed page-locked host memory that the GPU can read and write.")
      .def(py::init<std::size_t>(), "size_bytes"_a)
      .def_property_readonly("host_address", &cuda::MappedHostMemory::host_address)
      .def_property_readonly("device_address", &cuda::MappedHostMemory::device_address)
      .def_property_readonly("size_bytes", &cuda::MappedHostMemory::size_bytes)
      .def("close", &cuda::MappedHostMemory::close, "Free the memory (idempotent).");
}
