weir_conformance::suite!(env!("CARGO_BIN_EXE_weir-smol"));
