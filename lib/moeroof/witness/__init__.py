"""moeroof.witness"""
