"""moeroof.models"""
