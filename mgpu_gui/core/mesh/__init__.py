"""Data x model meshes, planned before anything starts (issue 31).

`shape`: the mesh a run asks for ("2x2", "auto") and the meshes a device count
allows; `layout`: which variables are sharded over the model axis, automatically
or by the user's regex rules (the rule shape of Keras' `LayoutMap`); `memory`:
parameters, optimizer state and gradients per device for each mesh, against
the GPUs' memory. Plain data in, plain data out: no TensorFlow or Keras here;
the variables come from the model probe child (`ModelProbed.variables`).
"""
