// A kernel's dynamic shared memory: QWEN38_DYNAMIC_SMEM(T, name, align) declares `T name[]` aligned to
// `align` bytes (extern __shared__). Under QWEN38_HOST_EMULATION (tests/native/*_host_emulation.cpp,
// where __shared__ is `static`: one CTA runs at a time) it is the emulation's shared-memory array.
#pragma once

#ifdef QWEN38_HOST_EMULATION
#define QWEN38_DYNAMIC_SMEM(T, name, align) T* const name = reinterpret_cast<T*>(::emu::g_smem)
#else
#define QWEN38_DYNAMIC_SMEM(T, name, align) extern __shared__ __align__(align) T name[]
#endif
