"""BigMoeOnEdge (Helldez/BigMoeOnEdge): a C++ engine over llama.cpp that streams routed experts from flash with
its own reader and expert cache; built here as ``bmoe-cli`` by the llama.cpp builder and cache."""
