// placeholder until the owner fills this library in
