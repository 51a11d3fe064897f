"""moeroof.core"""
